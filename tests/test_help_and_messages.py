"""Every message helps (issue 58, items 3-5): a value is quoted as typed, a misspelled choice of a
config group gets the closest name, an option typed at the top level points to its group, an
option of the other engine says so, and ``--help`` is the project's own page."""
from __future__ import annotations

import subprocess
import sys

import pytest

from test_config import REPO, make
from vecgossip.composition.root import validate
from vecgossip.core.errors import ConfigError


def one_line(overrides: list[str]) -> str:
    with pytest.raises((ConfigError, ValueError)) as err:
        validate(make(overrides), overrides)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_value_is_quoted_as_typed():
    """`nodes` is a knob (clients' full option); inside the quoted value it stays what was typed."""
    said = one_line(["method=dpsgd", "clock.enabled=true", "clock.barrier=nodes"])
    assert "clock.barrier='nodes' is unknown; allowed: global, node" in said


@pytest.mark.parametrize("over, said", [
    ("method=dpsgdd", "method=dpsgdd is unknown (did you mean dpsgd?); allowed: adpsgd, balance"),
    ("model=lenett", "model=lenett is unknown (did you mean lenet?); allowed: char_lstm, char_transformer, cnn, lenet, mlp, resnet18, vgg11"),
    ("data=mnistt", "data=mnistt is unknown (did you mean mnist?); allowed: cifar10, cifar100, fashion_mnist, mnist, shakespeare"),
    ("topology=rign", "topology=rign is unknown (did you mean ring?); allowed: complete, directed_ring"),
    ("model=", "model= needs a value; allowed: char_lstm, char_transformer, cnn, lenet"),
    ("lr=abc", "unknown option lr; did you mean optim.lr?"),
])
def test_a_misspelled_choice_or_option_gets_the_closest_name_in_one_line(over, said):
    proc = subprocess.run([sys.executable, "-m", "vecgossip", over], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_an_option_of_the_other_engine_says_so():
    proc = subprocess.run([sys.executable, "-m", "vecgossip", "method=gossip", "data.global_test_size=100"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == ("vecgossip: error: data.global_test_size is not read on "
                                                            "the tick engine (method=gossip); it is the rounds "
                                                            "engine's option")


def test_help_is_the_projects_own_page():
    """What a run is, both engines, each group with its shipped choices, sweeps, the docs; Hydra's
    page is still at --hydra-help. Exit 0, no run folder."""
    proc = subprocess.run([sys.executable, "-m", "vecgossip", "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    out = proc.stdout
    assert proc.returncode == 0 and out.startswith("vecgossip: gossip learning")
    for words in ("usage: python -m vecgossip", "tick ", "rounds ", "Sweeps: -m", "--hydra-help", "Configuration reference",
                  "dfedsam_mgs", "fashion_mnist", "one_peer_exponential", "table1"):
        assert words in out, words
    assert len(out.splitlines()) < 60 and max(map(len, out.splitlines())) <= 115
    hydra = subprocess.run([sys.executable, "-m", "vecgossip", "--hydra-help"], cwd=REPO, capture_output=True,
                           text=True, timeout=120)
    assert hydra.returncode == 0 and "Hydra" in hydra.stdout


def test_an_attack_with_the_adversary_off_says_it_has_no_effect():
    """With no Byzantine node a misspelled attack is not "a bad value" but an option with no
    effect: one line saying what turns it on (a real attack says the same)."""
    for attack in ("foo", "sign_flip"):
        said = one_line(["method=dpsgd", f"adversary.attack={attack}"])
        assert said.startswith("adversary.attack has no effect without adversary.nodes"), said
    assert "is not an attack" in one_line(["method=dpsgd", "adversary.attack=foo", "adversary.nodes=2"])
