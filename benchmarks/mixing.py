"""Gossip delivery: every receiver's sum of its neighbours' models, three ways, side by side.

    python benchmarks/mixing.py [--n 50 1000] [--k 8 32] [--p 431080]

sparse: CSR A (N, N) @ X (N, P) (what the engine uses); gather: index_add of X[senders] per link,
chunked to bound memory; dense: W @ X with a dense (N, N) matrix. All three agree (checked).
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

from common import emit, header, interleaved, summary
from vecgossip.network.mixing import adjacency, gather_sum, to_torch_csr
from vecgossip.network.topology import random_regular


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[50, 1000])
    ap.add_argument("--k", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--p", type=int, default=431_080, help="parameters per node (LeNet: 431080)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    print(header(f"mixing: sum of neighbours' models, P={a.p}", a.device))
    rows = []
    for n in a.n:
        x = torch.randn(n, a.p, device=a.device)
        for k in a.k:
            adj = adjacency(random_regular(n, k, 0))
            csr = to_torch_csr(adj, a.device)
            dense = torch.from_numpy(adj.toarray()).to(a.device)
            coo = adj.tocoo()
            recv = torch.from_numpy(coo.row.astype(np.int64)).to(a.device)
            send = torch.from_numpy(coo.col.astype(np.int64)).to(a.device)
            chunk = max(1, (1 << 26) // a.p)

            def gather():
                out = torch.zeros_like(x)
                for lo in range(0, recv.numel(), chunk):
                    out.index_add_(0, recv[lo:lo + chunk], x[send[lo:lo + chunk]])
                return out

            ref = dense @ x
            for name, f in (("sparse", lambda: gather_sum(csr, x)), ("gather", gather)):
                err = float((f() - ref).abs().max() / ref.abs().max())
                assert err < 1e-5, (name, err)
            fns = {"sparse": lambda: gather_sum(csr, x), "gather": gather, "dense": lambda: dense @ x}
            t = interleaved(fns, reps=a.reps if n <= 50 else 3, device=a.device)
            bytes_min = (n * k + n) * a.p * 4  # read each sent model once per link + write the output
            row = {"N": n, "k": k}
            for name in fns:
                row[f"{name}_ms"] = 1e3 * t[name]["median"]
            row["sparse_GB/s"] = bytes_min / t["sparse"]["median"] / 1e9
            row["dense/sparse"] = t["dense"]["median"] / t["sparse"]["median"]
            row["gather/sparse"] = t["gather"]["median"] / t["sparse"]["median"]
            emit(rows, row)
    summary(rows, "median ms; ratios > 1: sparse is faster")


if __name__ == "__main__":
    main()
