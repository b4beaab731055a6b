"""The Triton kernel of the GPU's compressed sends (:mod:`.masked_send`; CUDA, or Triton's CPU
interpreter in the tests): one launch delivers every link of a tick.

Program (block b of the flat parameters, receiver row r): ``acc`` = the receiver's buffer sum on
the block; for each of r's links in order, the Philox words of the block's elements (counter
(group within the parameter, link id, parameter index, 0), key = the tick's key) choose the
sender's or the receiver's element, ``acc += got``, and with MOMENTS the block's sums of got and
got^2 go to the link's partial sums. No two programs write the same element of ``total`` (a
receiver's links are one program's loop), so the sums are deterministic and equal the torch
twin's bit for bit; no (links, P) tensor exists."""
from __future__ import annotations

import triton
import triton.language as tl



@triton.jit
def _deliver(total_ptr, theta_ptr, src_ptr, part1_ptr, part2_ptr, rows_ptr, indptr_ptr, link_ptr, send_ptr,
             bstart_ptr, bstop_ptr, bseg_ptr, brel_ptr, key, bound, NB, stride_total, stride_theta, stride_src,
             MOMENTS: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    ridx = tl.program_id(1)
    r = tl.load(rows_ptr + ridx)                                  # int64: row offsets past 2^31
    lo = tl.load(indptr_ptr + ridx)
    hi = tl.load(indptr_ptr + ridx + 1)
    start = tl.load(bstart_ptr + b)
    stop = tl.load(bstop_ptr + b)
    seg = tl.load(bseg_ptr + b).to(tl.uint32)
    rel = tl.load(brel_ptr + b)
    cols = start + tl.arange(0, BLOCK)
    valid = cols < stop
    own = tl.load(theta_ptr + r * stride_theta + cols, mask=valid, other=0.0)
    acc = tl.load(total_ptr + r * stride_total + cols, mask=valid, other=0.0)
    zero = tl.zeros((BLOCK // 4,), dtype=tl.uint32)
    groups = (rel // 4 + tl.arange(0, BLOCK // 4)).to(tl.uint32)   # Philox counter c0: 4 elements a call
    for i in range(lo, hi):
        e = tl.load(link_ptr + i).to(tl.uint32)
        s = tl.load(send_ptr + i)
        w0, w1, w2, w3 = tl.philox(key, groups, zero + e, zero + seg, zero)
        words = tl.interleave(tl.interleave(w0, w2), tl.interleave(w1, w3))   # element 4g + w <- word w
        keep = words < bound
        x = tl.load(src_ptr + s * stride_src + cols, mask=valid & keep, other=0.0)
        got = tl.where(keep, x, own)
        acc += got
        if MOMENTS:
            g = tl.where(valid, got, 0.0)
            tl.store(part1_ptr + i * NB + b, tl.sum(g, axis=0))
            tl.store(part2_ptr + i * NB + b, tl.sum(g * g, axis=0))
    tl.store(total_ptr + r * stride_total + cols, acc, mask=valid)


def deliver_masked(total, theta, src, part1, part2, plan, blocks, key: int, bound: int, moments: bool,
                   block: int) -> None:
    """Launch :func:`_deliver` over (blocks, receivers) for a :class:`~.masked_send.SendPlan`."""
    for t in (total, theta, src):
        if t.stride(1) != 1:
            raise ValueError("deliver_masked: the state must have unit column stride")
    receivers = int(plan.rows.numel())
    if receivers > 65535:
        raise ValueError(f"deliver_masked: {receivers} receivers in one tick; the launch grid takes 65,535")
    grid = (blocks.count, receivers)
    _deliver[grid](total, theta, src, part1, part2, plan.rows, plan.indptr, plan.link, plan.send, blocks.start,
                   blocks.stop, blocks.segment, blocks.rel, key, bound, blocks.count, total.stride(0),
                   theta.stride(0), src.stride(0), MOMENTS=moments, BLOCK=block)

