"""Node sharding (vecgossip/runtime/shard.py): 2 and 3 gloo ranks under torchrun give the outputs of one
process, byte for byte, for the tick engine with and without compression and the TL rule, and for
the round engine (gossip with Q steps, and the FedSAM server).

The reference process runs with one thread, as torchrun gives each rank by default: the CPU
kernels (MKL, oneDNN) split their reductions by thread count, so equal bits need equal threads
per process."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from omegaconf import OmegaConf

from hydra import compose, initialize_config_dir

from vecgossip.runtime import checkpoint, shard
from vecgossip.core.errors import ConfigError
from vecgossip.composition.root import validate

from conftest import REPO, comparable

SMALL = ["model=mlp", "nodes=13", "degree=4", "max_ticks=80", "eval_every=10", "progress=false",
         "engine.train_chunk=3", "engine.eval_chunk=4"]
SECONDS = ["clock.enabled=true", "clock.resolution=0.1", "clock.compute.model=stragglers",
           "clock.links.uplink=[{nodes:9,mbps:40},{nodes:4,mbps:[10,13]}]", "clock.links.latency=0.002"]
CASES = {   # name: (ranks, overrides): 13 nodes split 7/6 or 5/4/4
    "sync-dense-all_to_all": (2, ["method=gossip"]),
    "vc-async-dirichlet-all_to_all": (3, ["method=vc", "t_acq=[5,15]", "alpha=0.5", "save_models=true"]),
    "compression-correction-all_gather": (2, ["method=compression", "compression=0.3", "correction=true",
                                              "t_acq=[5,15]", "distributed.exchange=all_gather"]),
    "fedavg_tick-star-server": (2, ["method=fedavg_tick", "topology=star"]),
    "tl-compression-all_to_all": (3, ["method=tl_compression", "engine.tl.period=20", "engine.tl.add_at=0.3",
                                      "engine.tl.drop_at=0.05", "t_acq=[1,19]"]),
    "vc-private-all_to_all": (2, ["method=vc", "t_acq=[5,15]", "privacy.noise_multiplier=1.0"]),  # DP-SGD's streams
    # in virtual seconds (issue 48): snapshots fetched from their owners at the send, compacted, churn
    "compression-seconds-all_to_all": (3, ["method=compression", "compression=0.3", "correction=true", *SECONDS,
                                           "clock.churn.model=bernoulli", "clock.churn.period=0.5"]),
    "gossip-seconds-fifo-all_gather": (2, ["method=gossip", *SECONDS, "clock.policy=fifo",
                                           "distributed.exchange=all_gather"]),
    # the asynchronous algorithms' own paths: fragments (a rank's receivers' sums), per-link caches,
    # age-weighted merges (the senders' ages gathered from their ranks)
    "divshare-seconds-churn": (3, ["method=divshare", "algorithm.peers=3", *SECONDS, "clock.compute.seconds=0.1",
                                   "clock.churn.model=bernoulli", "clock.churn.period=0.5", "max_ticks=40"]),
    "swift-seconds": (3, ["method=swift", *SECONDS, "clock.compute.seconds=0.1", "max_ticks=40"]),
    "adpsgd-seconds-churn": (3, ["method=adpsgd", *SECONDS, "clock.compute.seconds=0.1", "max_ticks=40",   # exchanges
                                 "clock.churn.model=bernoulli", "clock.churn.period=0.3"]),   # across ranks, cut
    "gossip_timers-seconds": (2, ["method=gossip_timers", *SECONDS, "clock.compute.seconds=0.1", "max_ticks=60"]),
}
ROUNDS = ["data=cifar10", "model=cnn", "eval_every=2", "local_steps=2", "local_epochs=null",
          "data.batch_size=8", "data.local_test_size=20", "data.global_test_size=50"]
# The CNN runs every node of a chunk as one grouped convolution (groups = nodes, core/layers.py), and
# oneDNN picks its kernel (and so its last bits) by the group count: a node's numbers are the same in
# both runs when every rank's shard starts and ends on a chunk boundary, so that each chunk holds the
# same nodes. Hence 9 clients on 3 ranks (3/3/3) and 6 on 2 (3/3) with chunks of 3, 63 on 3 ranks
# (21 each) with chunks of 3 and 7; FedSAM trains a random half, so its chunks are single clients.
CHUNKS = ["engine.train_chunk=3", "engine.eval_chunk=3"]
ROUND_CASES = {   # the round engine (paper 2): dense W on 9 or 6 clients, 63 on a ring (CSR W)
    "dfedsam_mgs-exponential-dirichlet": (3, ["method=dfedsam_mgs", "topology=exponential", "alpha=0.5",
                                              "clients=9", "rounds=4", *CHUNKS]),
    "fedsam-server-participation": (2, ["method=fedsam", "participation=0.5", "clients=6", "rounds=4",
                                        "engine.train_chunk=1", "engine.eval_chunk=3"]),
    "dfedavgm-ring-all_to_all": (3, ["method=dfedavgm", "topology=ring", "clients=63", "rounds=2",
                                     "engine.train_chunk=3", "engine.eval_chunk=7"]),
    "dfedavgm-ring-private": (2, ["method=dfedavgm", "topology=ring", "clients=6", "rounds=3",   # DP-SGD's noise streams
                                  "privacy.noise_multiplier=1.0", *CHUNKS]),
}
CLOCKED = {   # the round engine in virtual seconds (issue 48): stragglers, slow uplinks and churn on 3 ranks; the
    # clock runs replicated on every rank (its inputs are the global schedule and matrices), the online
    # clients come from the churn draws of all clients
    "dfedavgm-clock-churn": (3, ["method=dfedavgm", "topology=ring", "clients=12", "rounds=4", "model=mlp",
                                 "eval_every=2", "local_steps=2", "local_epochs=null", "data.batch_size=8",
                                 "data.local_test_size=20", "data.global_test_size=50", "engine.train_chunk=4",
                                 "engine.eval_chunk=4", "clock.enabled=true", "clock.compute.model=stragglers",
                                 "clock.links.uplink=[{nodes:10,mbps:60},{nodes:2,mbps:[10,13]}]", "clock.links.latency=0.001",
                                 "clock.churn.model=bernoulli", "clock.churn.period=0.5",
                                 "clock.churn.availability=0.7"]),
}
CLOCKED["dfedavgm-node-barrier"] = (3, [*(o for o in CLOCKED["dfedavgm-clock-churn"][1] if "churn" not in o),
                                        "clock.barrier=node"])    # replicated events, rows timed after their round
TEXT_CASES = {   # data=shakespeare (issue 57): each rank evaluates its clients on all their own test windows
    "dpsgd-text-roles": (2, ["method=dpsgd", "topology=ring", "data=shakespeare", "model=char_lstm", "model.width=8",
                             "model.exec=per_client", "clients=4", "rounds=2", "data.global_test_size=40",
                             "data.batch_size=4"]),
}
IGNORED = ("wall_seconds", "ticks_per_second", "seconds_per_round", "shards", "threads")   # may differ


def compose_cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(REPO / "vecgossip" / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                          "MASTER_PORT")}
    e["OMP_NUM_THREADS"] = "1"
    return e


def run_cli(out, overrides: list[str], ranks: int, root) -> subprocess.CompletedProcess:
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
                if ranks > 1 else [sys.executable])
    base = (["progress=false"] if "model=cnn" in overrides or "clients=12" in overrides or "data=shakespeare" in overrides
            else SMALL)   # round cases: their own
    if "topology=star" in overrides:                                   # a star takes no degree
        base = [o for o in base if not o.startswith("degree=")]
    return subprocess.run([*launcher, "-m", "vecgossip", *base, *overrides, f"data_root={root}",
                           f"hydra.run.dir={out}"],
                          env=env(), capture_output=True, text=True, timeout=600)


SLOW = {"sync-dense-all_to_all", "fedsam-server-participation", "dfedsam_mgs-exponential-dirichlet",
        "dfedavgm-ring-private",   # DP-SGD's sharded noise streams stay covered by vc-private-all_to_all
        "vc-async-dirichlet-all_to_all",   # covered by the other cases' paths (3 ranks, Dirichlet, async); -m slow
        "gossip-seconds-fifo-all_gather", "gossip_timers-seconds",   # its path: divshare's + a gather of ages
        "dfedavgm-node-barrier",   # the same matrices into a host-only timer as dfedavgm-clock-churn's
        # the suite's time (issue 58 item 11): by default one sharded case per path family stays
        # (divshare-seconds-churn: timed messages, parts, churn; dfedavgm-clock-churn: the round
        # engine, its clock, churn; vc-private-all_to_all: async ticks, DP noise streams; the
        # vc-seconds SIGTERM resume); these run with -m slow:
        "dfedavgm-ring-all_to_all",   # the CSR W at 63 clients
        "compression-seconds-all_to_all", "compression-correction-all_gather",   # compressed sends, sharded
        "swift-seconds", "adpsgd-seconds-churn",   # the latest-per-link inbox and paired messages, sharded
        "tl-compression-all_to_all", "fedavg_tick-star-server"}   # the peer rule and the relay server, sharded


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c
                                  for c in [*CASES, *ROUND_CASES, *CLOCKED, *TEXT_CASES]])
def test_sharded_run_equals_one_process(tmp_path, case, data_root):
    ranks, overrides = (CASES[case] if case in CASES else CLOCKED[case] if case in CLOCKED
                        else TEXT_CASES[case] if case in TEXT_CASES
                        else (ROUND_CASES[case][0], ROUNDS + ROUND_CASES[case][1]))
    one, many = tmp_path / "one", tmp_path / "many"
    for out, g in ((one, 1), (many, ranks)):
        proc = run_cli(out, overrides, g, data_root)
        assert proc.returncode == 0, proc.stderr[-3000:]
    timed = ("clock_nodes.csv",) if "clock.enabled=true" in overrides else ()    # per node: links, bytes, idle
    for name in ("metrics.csv", "accuracy.npy", "ticks.npy" if case in CASES else "rounds.npy", *timed):
        assert (one / name).read_bytes() == (many / name).read_bytes(), name
    a, b = (json.loads((d / "summary.json").read_text()) for d in (one, many))
    assert comparable(a, IGNORED) == comparable(b, IGNORED)
    assert b["shards"]["processes"] == ranks and "shards" not in a
    if "save_models=true" in overrides:       # the final models, gathered from the ranks
        import torch
        load = lambda d: torch.load(d / "models.pt", weights_only=False)["theta"]  # noqa: E731
        assert torch.equal(load(one), load(many))
    if case == "dfedavgm-ring-all_to_all":   # rank 0's 21 clients need 2 rows from the others, not 42
        assert b["shards"]["model_bytes_received_rank0"] == 2 * 2 * 878_538 * 4   # rounds x rows x P x fp32
    assert not any(p.name.startswith("checkpoint") for p in many.iterdir())   # removed once complete
    if case in CLOCKED:    # the clock did act: stragglers waited for, clients offline
        assert a["clock"]["virtual_seconds"] > 4 * 2 * 0.1 and a["clock"]["idle_max"] > 0
        import pandas as pd
        if "churn" in case:
            assert pd.read_csv(many / "metrics.csv").clients_online.min() < 12
        else:
            assert not pd.read_csv(many / "metrics.csv").seconds.isna().any()
    if "seconds" in case:    # messages were in flight past a window and nodes went offline
        assert a["clock"]["staleness_mean"] > 0.05 and a["clock"]["in_flight"] > 0
        if "clock.churn.model=bernoulli" in overrides:
            assert a["clock"]["messages_aborted"] > 0
    if "tl" in case:    # the peer rule did act: links were added
        import pandas as pd
        assert pd.read_csv(many / "metrics.csv").links_active.max() > 0


def test_split_and_node_sets():
    assert shard.split(13, 3).tolist() == [0, 5, 9, 13]          # sizes 5, 4, 4
    assert shard.split(4, 4).tolist() == [0, 1, 2, 3, 4]
    sh = shard.Shard(13, rank=1, world=3)
    assert (sh.lo, sh.hi, sh.size) == (5, 9, 4)
    nodes = np.array([0, 4, 5, 8, 9, 12])
    assert sh.counts(nodes).tolist() == [2, 2, 2]
    assert nodes[sh.block(nodes)].tolist() == [5, 8]
    assert sh.owner(np.array([0, 4, 5, 8, 9, 12])).tolist() == [0, 0, 1, 1, 2, 2]
    one = shard.Shard(13)                                        # one process: collectives are identities
    assert one.sum_int(3) == 3 and one.union(nodes) is nodes and one.broadcast("x") == "x"
    with pytest.raises(ValueError, match="distributed.exchange"):
        shard.Shard(13, exchange="broadcast")


def test_checkpoint_decisions_are_agreed(tmp_path):
    """A rank whose clock says 'due' makes every rank write (agree = any over ranks): here the
    other ranks' vote is simulated by an agree that says yes."""
    votes = []
    ck = checkpoint.Checkpointer(tmp_path, every=None, seconds=None, meta={}, name=checkpoint.file_name(1, 2),
                                 agree=lambda flag: votes.append(flag) or True)
    assert ck(5, lambda: {"x": 1}) is True          # agreed: written, and the (agreed) stop request holds
    assert (tmp_path / "checkpoint.rank1of2.pt").exists() and votes == [False, False]
    assert checkpoint.load(tmp_path / "checkpoint.rank1of2.pt")["pos"] == 5
    assert checkpoint.file_name() == "checkpoint.pt"


def test_sharded_runs_reject_what_they_do_not_support(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    validate(compose_cfg(["method=dfedavg", "data=cifar10", "model=cnn", "clients=8", "topology=ring"]), [])
    validate(compose_cfg(["method=fedavg_tick", "topology=star"]), [])
    validate(compose_cfg(["method=dfedavg", "clients=8", "topology=ring", "clock.enabled=true"]), [])   # timed rounds
    validate(compose_cfg(["method=adpsgd", "clock.enabled=true", "clock.resolution=0.1"]), [])       # in seconds
    for overrides, match in ((["faults.drop=0.1"], "faults"),
                             (["broadcast_init=true"], "broadcast_init"),
                             (["distributed.exchange=bcast"], "distributed.exchange")):
        cfg = compose_cfg(overrides)
        with pytest.raises(ConfigError, match=match):
            validate(cfg, [])
    monkeypatch.setenv("WORLD_SIZE", "14")
    with pytest.raises(ConfigError, match="at least one node"):
        validate(compose_cfg(["nodes=13", "degree=4"]), [])
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(ConfigError, match="torchrun"):
        validate(compose_cfg(["distributed.enabled=true"]), [])
    validate(compose_cfg(["distributed.enabled=false"]), [])
    assert OmegaConf.select(compose_cfg([]), "distributed.enabled") == "auto"


def test_a_shard_draws_its_rows_of_the_initial_models(monkeypatch):
    """init_theta(rows=...) gives rows lo..hi of the whole draw, block by block (memory: the shard's)."""
    import torch

    from vecgossip.core import state as stack
    from vecgossip.models import get_model
    layout = stack.Layout.of(get_model("lenet").factory((1, 28, 28), 10))
    whole = stack.init_theta(layout, 13, "caffe_xavier", torch.Generator().manual_seed(3))
    monkeypatch.setattr(stack, "INIT_BLOCK", 1000)             # many blocks, split inside shards
    for lo, hi in zip(shard.split(13, 3)[:-1], shard.split(13, 3)[1:]):
        part = stack.init_theta(layout, 13, "caffe_xavier", torch.Generator().manual_seed(3), rows=(lo, hi))
        assert torch.equal(part, whole[lo:hi])


RESUMED = {   # the plain tick engine, and in virtual seconds with messages in flight at the checkpoint
    "vc": ["method=vc", "t_acq=[5,15]", "max_ticks=1500", "checkpoint_every=50"],
    "vc-seconds": ["method=vc", *SECONDS, "max_ticks=120", "checkpoint_every=10"],
}


@pytest.mark.parametrize("case", [pytest.param("vc", marks=pytest.mark.slow), "vc-seconds"])   # the same machinery
def test_sharded_run_stopped_by_sigterm_resumes_exactly(tmp_path, data_root, case):
    """SIGTERM to torchrun: both ranks checkpoint at the same tick (one file each) and exit; the same
    command continues, and the outputs equal one uninterrupted process's, byte for byte."""
    import signal
    import time
    overrides = RESUMED[case]
    one, many = tmp_path / "one", tmp_path / "many"
    assert run_cli(one, overrides, 1, data_root).returncode == 0
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "vecgossip",
           *SMALL, *overrides, f"data_root={data_root}", f"hydra.run.dir={many}"]
    proc = subprocess.Popen(cmd, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    files = [many / checkpoint.file_name(r, 2) for r in range(2)]
    deadline = time.monotonic() + 300
    while not all(f.exists() for f in files) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before a checkpoint was written: make it longer"
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=300)[1]
    assert "interrupted at" in err and all(f.exists() for f in files) and not (many / "summary.json").exists()
    if case == "vc-seconds":      # each rank kept messages in flight and its snapshots of their models
        blobs = [checkpoint.load(f) for f in files]
        flights = [b["engine"]["engines"][0]["clock"]["transport"] for b in blobs]
        assert all(f["flow"]["sender"].size > 0 and f["snaps"] and f["here"] for f in flights)
    assert run_cli(many, overrides, 2, data_root).returncode == 0
    for name in ("metrics.csv", "accuracy.npy"):
        assert (one / name).read_bytes() == (many / name).read_bytes(), name
    assert not any(f.exists() for f in files)
