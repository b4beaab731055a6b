"""Grouped vs per-client convolution, per client, for the conv layers of LeNet and the CNN.

    python benchmarks/conv_groups.py [--batch 128] [--groups 1 2 4] [--reps 7]

The batched models fold c clients into one grouped convolution (groups = c, channels_last) or run
each client's own convolution (groups = 1, the per-client loop's call). Which is faster depends on
the CPU's oneDNN kernels: this prints forward and backward (input gradient where the layer needs it,
and the weight gradient) per client for each c, interleaved in one run. models/cnn.py trains with
per-client calls on the strength of this measurement (RESULTS.md).
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from common import header, interleaved, table
from floor import K, LAYERS as MODEL_LAYERS, _oneDNN

LAYERS = {f"{model}.{name}": (cin, cout, s, needs_dx)              # "cnn.conv1": (in, out, side, input grad)
          for model, layers in MODEL_LAYERS.items() for name, cin, cout, s, needs_dx in layers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--groups", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--layers", nargs="+", default=list(LAYERS), choices=list(LAYERS))
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    print(header(f"grouped vs per-client convolution, batch {a.batch}", "cpu"), flush=True)
    cl, rows = torch.channels_last, []
    for name in a.layers:
        cin, cout, s, needs_dx = LAYERS[name]
        fns = {}
        for c in a.groups:
            x = torch.randn(a.batch, c * cin, s, s).contiguous(memory_format=cl)
            w = torch.randn(c * cout, cin, K, K).contiguous(memory_format=cl)
            g = torch.randn(a.batch, c * cout, s - K + 1, s - K + 1).contiguous(memory_format=cl)
            fns[(c, "forward")] = lambda x=x, w=w, c=c: F.conv2d(x, w, groups=c)
            fns[(c, "backward")] = lambda x=x, w=w, g=g, c=c: _oneDNN(x, w, g, c, [needs_dx, True, False])
        t = interleaved(fns, reps=a.reps)
        for c in a.groups:
            fw, bw = t[(c, "forward")]["median"] / c, t[(c, "backward")]["median"] / c
            rows.append({"layer": name, "groups": c, "forward_ms_per_client": 1e3 * fw,
                         "backward_ms_per_client": 1e3 * bw, "total_ms_per_client": 1e3 * (fw + bw)})
    print(table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
