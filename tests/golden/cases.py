"""Issue 23's recordings: one short run per built-in method and variant, made with the code as it
was BEFORE the algorithm interface (commit 655ccd5: e94ebc2 + precision=fp64 + register_dataset), which tests/test_golden.py
must reproduce. Everything runs in float64 (``precision=fp64``) on a small synthetic data set
registered through the public ``vecgossip.register_dataset``, so that a CPU whose kernels round
differently changes the numbers by ~1e-15, not by an amplified float32 ulp (issue 22).

    python tests/golden/cases.py [CASE ...] # (re)record cases into tests/golden/<case>/ (+ its machine.json)

Recording again is only right when a change is MEANT to change outputs; say so in the commit.
Re-recorded since: compression, vc_shards_local, vc_mimic, staleness_gossip and el_async (issue 56,
commit cef10d9: the CPU's SGD step in one pass on the state's rows rounds differently; every number
stayed within 1e-12 absolute of the earlier recording)."""
from __future__ import annotations

import json
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
FILES = ("metrics.csv", "accuracy.npy")          # what a run writes and the test compares
STORED = {"metrics.csv": "metrics.csv", "accuracy.npy": "accuracy.txt"}   # as kept here: text, no binaries
COMMON = ["data.name=golden", "precision=fp64", "progress=false", "checkpoint_seconds=null", "save_models=false",
          "model.exec=batched"]     # the path the recordings were made on (model.exec=auto measures)
TICK = ["model=mlp", "nodes=6", "max_ticks=41", "eval_every=10", "t_acq=5", "data.batch_size=8"]
ROUNDS = ["model=mlp", "clients=6", "topology=ring", "rounds=3", "eval_every=1", "data.batch_size=8",
          "local_steps=2", "local_epochs=null", "data.global_test_size=40", "data.local_test_size=10",
          "data.min_samples=5"]
CASES: dict[str, list[str]] = {
    # the tick engine's six methods (paper 1) ...
    "gossip": ["method=gossip", *TICK, "degree=2"],
    "vc": ["method=vc", *TICK, "degree=2"],
    "compression": ["method=compression", *TICK, "degree=2"],
    "tl": ["method=tl", *TICK, "degree=2", "engine.tl.period=10", "engine.tl.add_at=0.15", "engine.tl.drop_at=0.05", "engine.tl.samples=20"],
    "tl_compression": ["method=tl_compression", *TICK, "degree=2", "engine.tl.period=10", "engine.tl.add_at=0.15", "engine.tl.drop_at=0.05",
                       "engine.tl.samples=20"],
    "fedavg_tick": ["method=fedavg_tick", *TICK],
    # ... and variants: asynchronous T_acq, R = 2, non-IID label mixes, faults, replicas
    "vc_async_noniid": ["method=vc", *TICK, "degree=2", "t_acq=[1,7]", "R=2", "alpha=0.5"],
    "vc_shards_local": ["method=vc", *TICK, "degree=2", "alpha=0.5", "data.sampler=shards", "data.eval_set=local",
                        "data.local_eval_size=10"],
    "vc_faults": ["method=vc", *TICK, "degree=2", "faults.drop=0.2", "faults.offline=0.1"],
    "vc_replicas": ["method=vc", *TICK, "degree=2", "replicas=2"],
    "gossip_lenet": ["method=gossip", *TICK, "degree=2", "model=lenet", "max_ticks=21"],
    # the round engine's seven methods (paper 2) ...
    "dpsgd": ["method=dpsgd", *[r for r in ROUNDS if r != "local_steps=2"], "local_steps=1"],   # D-PSGD: one step
    "dfedavg": ["method=dfedavg", *ROUNDS],
    "dfedavgm": ["method=dfedavgm", *ROUNDS],
    "dfedsam": ["method=dfedsam", *ROUNDS],
    "dfedsam_mgs": ["method=dfedsam_mgs", *ROUNDS],
    "fedavg": ["method=fedavg", *ROUNDS, "participation=0.5"],
    "fedsam": ["method=fedsam", *ROUNDS, "participation=0.5"],
    # ... and variants: random graphs, Dirichlet shards, partial participation, faults, replicas, a CNN
    "dfedavgm_random_noniid": ["method=dfedavgm", *ROUNDS, "topology=random", "degree=2", "alpha=0.5"],
    "dfedsam_participation": ["method=dfedsam", *ROUNDS, "participation=0.5"],
    "dfedavg_faults": ["method=dfedavg", *ROUNDS, "faults.drop=0.2", "faults.offline=0.1"],
    "fedavg_faults": ["method=fedavg", *ROUNDS, "participation=0.5", "faults.drop=0.2"],
    "dfedsam_replicas": ["method=dfedsam", *ROUNDS, "replicas=2"],
    "dfedsam_cnn": ["method=dfedsam", *ROUNDS, "model=cnn", "rounds=2"],
    # issue 24's baselines, recorded with their first version (each case folder's machine.json
    # says where): regression guards, not pre-refactor recordings
    "choco": ["method=choco", *ROUNDS, "local_steps=1", "algorithm.fraction=0.1", "algorithm.gamma=0.5"],
    "choco_qsgd_faults": ["method=choco", *ROUNDS, "local_steps=1", "algorithm.compressor=qsgd", "faults.drop=0.2",
                          "faults.offline=0.1"],
    "gradient_tracking": ["method=gradient_tracking", *ROUNDS, "local_steps=1"],
    "qgdsgdm": ["method=qgdsgdm", *ROUNDS, "local_steps=1"],
    "dsgdm": ["method=dsgdm", *ROUNDS, "local_steps=1"],
    "sgp": ["method=sgp", *ROUNDS, "local_steps=1", "topology=random_out", "degree=2"],
    "sgp_faults": ["method=sgp", *ROUNDS, "local_steps=1", "topology=one_peer_exponential", "faults.drop=0.2"],
    "el_local": ["method=el_local", *ROUNDS, "topology=complete", "algorithm.s=2"],
    "el_oracle": ["method=el_oracle", *ROUNDS, "topology=complete", "algorithm.s=2"],
    "el_local_faults": ["method=el_local", *ROUNDS, "topology=complete", "algorithm.s=2", "faults.drop=0.2"],
    "adpsgd": ["method=adpsgd", *TICK, "degree=2"],
    # issue 37's robust rules, FedPer and an attacked run, recorded with their first version
    "clipped_gossip": ["method=clipped_gossip", *ROUNDS, "local_steps=1", "topology=exponential"],
    "trimmed_mean_faults": ["method=trimmed_mean", *ROUNDS, "local_steps=1", "topology=exponential", "faults.drop=0.2"],
    "median": ["method=median", *ROUNDS, "local_steps=1", "topology=exponential"],
    "balance": ["method=balance", *ROUNDS, "local_steps=1", "topology=exponential"],
    "fedper": ["method=fedper", *ROUNDS],
    "dpsgd_alie": ["method=dpsgd", *ROUNDS, "local_steps=1", "topology=exponential", "adversary.nodes=1",
                   "adversary.attack=alie"],
    # issue 38's private training, recorded with its first version: Muffliato (DP-SGD, 4 gossip
    # steps; and Chebyshev), DFedAvgM with DP-SGD, DP on the tick engine
    "muffliato": ["method=muffliato", *[r for r in ROUNDS if r != "local_steps=2"]],
    "muffliato_chebyshev": ["method=muffliato", *[r for r in ROUNDS if r != "local_steps=2"], "algorithm.chebyshev=true"],
    "dfedavgm_private": ["method=dfedavgm", *ROUNDS, "privacy.noise_multiplier=0.8", "privacy.clip=0.5"],
    "vc_private": ["method=vc", *TICK, "degree=2", "privacy.noise_multiplier=1.0"],
    # issue 49: the tick engine's robust merge under an attack, and variance correction under mimic
    "robust_gossip": ["method=robust_gossip", *TICK, "degree=4", "adversary.nodes=[1]", "adversary.attack=sign_flip"],
    "vc_mimic": ["method=vc", *TICK, "degree=4", "adversary.nodes=[1,4]", "adversary.attack=mimic"],
    # issue 48: DivShare's fragments in virtual seconds (FIFO uplinks of 1 Mbit/s, 2 ms latency)
    "divshare": ["method=divshare", *TICK, "degree=2", "algorithm.fragments=4", "algorithm.peers=2",
                 "clock.links.uplink=1", "clock.links.latency=0.002", "clock.compute.seconds=1.0"],
    "gossip_timers": ["method=gossip_timers", *TICK, "degree=2", "clock.links.uplink=1", "clock.links.latency=0.3",
                      "clock.compute.seconds=1.0"],
    "swift": ["method=swift", *TICK, "degree=2", "clock.links.uplink=1", "clock.links.latency=0.3",
              "clock.compute.seconds=1.0"],
    # issue 55: two asynchronous algorithms on the public interface (their twins: tests/test_async_algorithms.py)
    "staleness_gossip": ["method=staleness_gossip", *TICK, "degree=2", "clock.links.uplink=1",
                         "clock.links.latency=0.3", "clock.compute.seconds=1.0"],
    "el_async": ["method=el_async", *TICK, "degree=2", "clock.links.uplink=1", "clock.links.latency=0.3",
                 "clock.compute.seconds=1.0"],
    # issue 55's asynchronous FL baseline and timed FedAvg, recorded with their first version
    "fedbuff": ["method=fedbuff", *ROUNDS, "rounds=4", "algorithm.buffer=2", "algorithm.concurrency=3",
                "clock.compute.model=lognormal", "clock.links.uplink=10", "clock.links.server=20"],
    "fedavg_seconds": ["method=fedavg", *ROUNDS, "participation=0.5", "clock.enabled=true",
                       "clock.compute.model=lognormal", "clock.links.uplink=10", "clock.links.server=20"],
}


def register() -> None:
    """The synthetic data set ``golden``: 600 / 200 float features (1, 28, 28) in [0, 1), labels
    0-9 (a class prototype plus noise), drawn from a fixed torch generator (the same numbers on
    every machine)."""
    import vecgossip
    g = torch.Generator().manual_seed(23)

    def split(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        labels = torch.randint(0, 10, (n,), generator=g)
        base = torch.randint(0, 256, (10, 1, 28, 28), generator=g, dtype=torch.uint8)  # one prototype per class
        noise = torch.rand((n, 1, 28, 28), generator=g)
        return (0.6 * base[labels] / 255 + 0.4 * noise), labels           # features in [0, 1)
    train = split(600)
    vecgossip.register_dataset("golden", train, split(200), num_classes=10, label="synthetic (golden)")


def run_case(name: str, out: Path) -> Path:
    """Run case ``name`` with its outputs in ``out`` (a fresh folder); returns the folder holding
    metrics.csv and accuracy.npy (the top level; replicas: also replica*/)."""
    import vecgossip
    register()
    # set explicitly (MKL's dgemm partitions by the count it was given: an explicit set_num_threads
    # can round differently from the default even at the same count), as the test does
    torch.set_num_threads(torch.get_num_threads())
    vecgossip.run(vecgossip.compose(overrides=[*CASES[name], *COMMON]), run_dir=out)
    return out


def save_accuracy(a: np.ndarray, path: Path) -> None:
    """accuracy.npy as text: 9 significant digits give every float32 back exactly."""
    np.savetxt(path, a, fmt="%.9g", header=f"shape {a.shape[0]} {a.shape[1]} {a.dtype}")


def load_accuracy(path: Path) -> np.ndarray:
    """The stored accuracy matrix, in its recorded shape and dtype (bit for bit the .npy's values)."""
    _, rows, cols, dtype = path.read_text().split("\n", 1)[0].lstrip("# ").split()
    return np.loadtxt(path, ndmin=2).astype(dtype).reshape(int(rows), int(cols))


def machine() -> dict:
    """What the recordings' bytes may depend on: the CPU's vector extensions and torch's build."""
    from vecgossip.models.execution import cpu_extensions
    return {"machine": platform.machine(), "extensions": cpu_extensions(), "torch": torch.__version__,
            "threads": torch.get_num_threads()}


def main() -> None:
    names = sys.argv[1:] or list(CASES)
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            got = run_case(name, Path(tmp) / name)
            dest = HERE / name
            shutil.rmtree(dest, ignore_errors=True)
            for f in sorted(got.rglob("*")):
                if f.name not in FILES:
                    continue
                to = dest / f.relative_to(got).with_name(STORED[f.name])
                to.parent.mkdir(parents=True, exist_ok=True)
                if f.suffix == ".npy":
                    save_accuracy(np.load(f), to)
                else:
                    shutil.copy2(f, to)
        (dest / "machine.json").write_text(json.dumps(machine(), indent=1) + "\n")
        print(name, "recorded")


def recorded_on(name: str) -> dict:
    """The machine kind that recorded case ``name``: its folder's machine.json, else the first
    recordings' (tests/golden/machine.json)."""
    own = HERE / name / "machine.json"
    return json.loads((own if own.exists() else HERE / "machine.json").read_text())


if __name__ == "__main__":
    main()
