"""What reliability costs: the divergence guard per round, and a checkpoint every 5 minutes, as a
fraction of run time, at N = 50 and N = 1000 LeNet nodes (tick engine, one synchronous round of
training + send + average, batch 64).

    python benchmarks/reliability.py [--n 50 1000] [--reps 3] [--every 300]

round = train + send + average, guard included (TickEngine.train takes the row sums chunk by chunk);
guard = the same round's training with the row sums left out, so guard% = (round - unguarded) / round,
measured interleaved. checkpoint = one state_dict written with torch.save
(atomically, as the engine does, without torch.save's CRC32; ckpt_crc32_s: with it, interleaved); its share of run time = write time / --every seconds. Each write
starts with the previous one on disk (os.sync, untimed: in a run the kernel flushes it in the
background during the 5 minutes between checkpoints); flush_s = how long that flush took, printed
for the record (back-to-back writes of a few GB wait for it: the page cache's dirty limit).
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path


from common import apply_malloc, emit, header, interleaved, make_engine, malloc_option, summary, sync_round
from vecgossip.runtime import checkpoint
from vecgossip.engines.tick.engine import History


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[50, 1000])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--every", type=float, default=300.0, help="seconds between checkpoints (the default)")
    ap.add_argument("--dir", default=None, help="where to write the checkpoints (default: the temp dir)")
    malloc_option(ap)
    a = ap.parse_args()
    malloc = apply_malloc(a.malloc)
    print(header("reliability overhead: divergence guard per round, checkpoint every --every s", "cpu", malloc))
    rows = []
    for n in a.n:
        eng = make_engine(n, 8, "lenet", "cpu")
        def round_():
            sync_round(eng)

        def unguarded():          # the same round without the guard's row sums
            eng.guard = False
            try:
                round_()
            finally:
                eng.guard = True
        t = interleaved({"round": round_, "unguarded": unguarded}, reps=a.reps)
        with tempfile.TemporaryDirectory(dir=a.dir) as d:
            writes, flushes, crc_writes = [], [], []
            for _ in range(a.reps):
                for crc, times in ((False, writes), (True, crc_writes)):   # interleaved: the default, then CRC32 on
                    s = time.perf_counter()
                    os.sync()           # what 5 minutes between checkpoints give: the last one is on disk
                    flushes.append(time.perf_counter() - s)
                    s = time.perf_counter()
                    checkpoint.save(Path(d) / checkpoint.FILE, {"engine": eng.state_dict(0, History())}, crc32=crc)
                    times.append(time.perf_counter() - s)
            size = (Path(d) / checkpoint.FILE).stat().st_size
            s = time.perf_counter()
            os.sync()
            flushes.append(time.perf_counter() - s)
        w = statistics.median(writes)
        guard = t["round"]["median"] - t["unguarded"]["median"]
        emit(rows, {"N": n, "round_ms": 1e3 * t["round"]["median"], "unguarded_ms": 1e3 * t["unguarded"]["median"],
                    "guard_pct": 100 * guard / t["round"]["median"],
                    "ckpt_s": w, "ckpt_crc32_s": statistics.median(crc_writes), "ckpt_GiB": size / 2**30,
                    "ckpt_pct": 100 * w / a.every,
                    "flush_s": statistics.median(flushes[1:]),
                    "policy_interval_s": max(a.every, w / checkpoint.MAX_SHARE),
                    "policy_pct": 100 * w / max(a.every, w / checkpoint.MAX_SHARE)})
    summary(rows, f"guard_pct = guard / round; ckpt_pct = one checkpoint write / {a.every:.0f} s; policy: the "
                  f"default spacing, max({a.every:.0f} s, write / {checkpoint.MAX_SHARE})")


if __name__ == "__main__":
    main()
