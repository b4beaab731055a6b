"""LEAF's Shakespeare samples (issue 57, first part): the parser on a small hand-written play, the
windows and the split counted by hand; and the real plays' statistics beside LEAF's."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from vecgossip.data.shakespeare import SEQ, VOCAB, encode, roles, speeches, split, windows

PLAY = """THE TRAGEDY OF TESTS

Persons Represented.

Kent.
A Fool.

ACT I.

SCENE I. A room.

[Enter Kent and Fool.]

Kent.
Good morrow,   fool.
[Aside] What news?

Fool.
None.

Kent.
Then go.

[Exeunt.]
"""


def test_a_hand_written_play_parses_into_its_speeches_and_roles():
    """The list of persons (before ACT I) is no speech; the bracketed directions and runs of
    spaces go; a block that is only a direction is no speech."""
    assert speeches(PLAY) == [("Kent", "Good morrow, fool. What news?"), ("Fool", "None."), ("Kent", "Then go.")]
    got = roles({"tests": PLAY}, min_lines=1)
    assert [(r.name, r.lines) for r in got] == [("tests_Kent", ("Good morrow, fool. What news?", "Then go.")),
                                                ("tests_Fool", ("None.",))]
    assert [r.name for r in roles({"tests": PLAY}, min_lines=2)] == ["tests_Kent"]


def test_windows_are_leafs_by_hand():
    """The speech None. and its newline: 6 characters, so 6 windows of 80; the first is 80 spaces -> N,
    the last is 75 spaces + 'None.' -> newline."""
    x, y = windows(("None.",))
    assert x.shape == (6, SEQ) and y.shape == (6,)
    assert "".join(VOCAB[i] for i in y) == "None.\n"
    assert "".join(VOCAB[i] for i in x[0]) == " " * SEQ
    assert "".join(VOCAB[i] for i in x[-1]) == " " * 75 + "None."
    assert encode("é")[0] == VOCAB.index(" ")          # outside LEAF's vocabulary: the space


def test_leafs_split_by_sample_by_hand():
    rng = np.random.default_rng(0)
    train, test = split(10, 0.8, rng)
    assert train.size == 8 and test.size == 2 and np.union1d(train, test).tolist() == list(range(10))
    assert [a.size for a in split(2, 0.8, rng)] == [1, 1] and split(1, 0.8, rng) is None


def test_the_plays_give_about_leafs_roles_and_samples(data_root):
    """LEAF's published statistics (Caldas et al. 2018, Table 1): 1,129 users, 4,226,158 samples,
    from Gutenberg's complete works; the 42 separate 1998 etexts here give 1,307 roles with at
    least one speech and 3.92 M samples (different editions, and roles not merged across
    LEAF's users filter)."""
    root = Path(data_root) / "shakespeare"
    plays = {p.stem.removesuffix("_gut"): p.read_text(encoding="latin-1") for p in sorted(root.glob("*_gut.txt"))}
    got = roles(plays, 1)
    total = sum(windows(r.lines)[0].shape[0] for r in got)
    assert len(plays) == 42 and 1200 <= len(got) <= 1400 and 3.5e6 <= total <= 4.5e6
