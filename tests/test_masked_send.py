"""Weight compression on the GPU's path (vecgossip/engines/tick/masked_send.py, issue 46): every link of
a tick in one pass, each element's mask from Philox4x32-10 keyed by (tick key, link id, position).

The loop twin draws its masks from an independent Philox written with Python integers (checked
against Random123's published known-answer vectors), builds each link's model element by element
and its layer variances with numpy; the kernel itself (Triton, under its CPU interpreter here)
must equal the torch twin bit for bit."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from vecgossip.core.device import force_gpu_paths
from vecgossip.core.state import Layout, ParamSpec
from vecgossip.engines.tick import masked_send
from vecgossip.engines.tick.buffer import Buffers
from vecgossip.engines.tick.masked_send import blocks_of, deliver, philox4x32, plan_links, threshold
from vecgossip.runtime.launches import count

M32 = 0xFFFFFFFF
KAT = [  # Random123 kat_vectors, philox4x32 10: counter words, key words, output
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((M32,) * 4, (M32, M32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]
LAYOUT = Layout((ParamSpec("a.weight", (2, 3), 0, 6), ParamSpec("a.bias", (2,), 6, 8),
                 ParamSpec("b.weight", (9,), 8, 17), ParamSpec("b.bias", (1,), 17, 18)))


def philox_int(ctr: tuple, key: tuple) -> tuple:
    """Philox4x32-10 in plain Python integers (Salmon et al. 2011): the independent reference."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & M32, (p0 >> 32) ^ c3 ^ k1, p0 & M32
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def link_mask(key: int, link: int, layout: Layout, p: float) -> np.ndarray:
    """(P,) which elements link ``link`` sends: element j of parameter k (its position r in it) is
    sent when word r % 4 of Philox(counter (r // 4, link, k, 0), key) is below floor(p 2^32)."""
    out = np.zeros(layout.size, dtype=bool)
    for k, s in enumerate(layout.specs):
        for r in range(s.numel):
            w = philox_int((r // 4, link, k, 0), (key & M32, key >> 32))[r % 4]
            out[s.start + r] = w < int(p * 2**32)
    return out


def loop_twin(theta: np.ndarray, recv, send, links, key: int, p: float, layout: Layout):
    """Per link: the receiver's model with the sender's elements where sent; buffer sums, counts and
    layer variances (numpy's population variance) added receiver by receiver."""
    n = theta.shape[0]
    total, var, cnt = np.zeros_like(theta), np.zeros((n, len(layout.weights))), np.zeros(n)
    for r, s, e in zip(recv, send, links):
        got = np.where(link_mask(key, e, layout, p), theta[s], theta[r])
        total[r] += got
        cnt[r] += 1
        var[r] += [got[w.start:w.stop].var() for w in layout.weights]
    return total, var, cnt


@pytest.mark.parametrize("ctr,key,want", KAT)
def test_philox_matches_random123_and_the_integer_reference(ctr, key, want):
    assert philox_int(ctr, key) == want
    t = [torch.tensor([c], dtype=torch.int64) for c in ctr]
    got = philox4x32(*t, key[0] | key[1] << 32)
    assert tuple(int(w) for w in got) == want


def test_delivery_equals_the_per_link_loop_twin():
    """A random graph's links, p = 0.4, float64: buffer sums exact, variances to 1e-12, counts."""
    g = torch.Generator().manual_seed(3)
    theta = torch.randn(6, LAYOUT.size, generator=g, dtype=torch.float64)
    recv = np.array([1, 0, 2, 1, 3, 5, 0, 1, 4, 4])
    send = np.array([0, 1, 1, 2, 4, 4, 5, 5, 0, 3])
    key = 0x1234_5678_9ABC
    buf = Buffers.empty(6, LAYOUT.size, 2, "cpu", torch.float64)
    plan = plan_links(recv, send, np.arange(recv.size), 6, torch.device("cpu"), torch.float64)
    deliver(buf.total, buf.var_total, buf.count, plan, theta, 0.4, key, LAYOUT, True)
    want, want_var, want_cnt = loop_twin(theta.numpy(), recv, send, range(recv.size), key, 0.4, LAYOUT)
    np.testing.assert_allclose(buf.total.numpy(), want, rtol=0, atol=1e-13)
    np.testing.assert_allclose(buf.var_total.numpy(), want_var, rtol=1e-12, atol=1e-14)
    assert buf.count.tolist() == want_cnt.tolist()
    masks = np.stack([link_mask(key, e, LAYOUT, 0.4) for e in range(recv.size)])
    assert masks.any() and not masks.all()                        # a real mix of sent and filled elements


def test_buffers_take_the_gpu_path_with_host_counts():
    """Buffers.receive_compressed on the GPU's path (forced on the CPU): the same as the twin, the
    key drawn from the numpy stream as on the CPU path, the host's counts kept."""
    theta = torch.randn(4, LAYOUT.size, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    recv, send = np.array([1, 2, 0, 2, 3]), np.array([0, 0, 2, 3, 2])
    buf = Buffers.empty(4, LAYOUT.size, 2, "cpu", torch.float64)
    with force_gpu_paths():
        buf.receive_compressed(recv, send, theta, 0.5, LAYOUT, torch.Generator(), rng=np.random.default_rng(4))
    key = int(np.random.default_rng(4).integers(0, 2**63))
    want, want_var, want_cnt = loop_twin(theta.numpy(), recv, send, range(5), key, 0.5, LAYOUT)
    np.testing.assert_allclose(buf.total.numpy(), want, rtol=0, atol=1e-13)
    np.testing.assert_allclose(buf.var_total.numpy(), want_var, rtol=1e-12, atol=1e-14)
    assert buf.held.tolist() == want_cnt.tolist() == buf.count.tolist()


def test_a_links_mask_depends_on_its_id_only():
    """Chunking (the twin's workspace budget), the order links are planned in and a shard's subset
    of links change nothing: each link draws by its own id."""
    theta = torch.randn(8, LAYOUT.size, generator=torch.Generator().manual_seed(2))
    rng = np.random.default_rng(0)
    recv, send = rng.integers(0, 8, 30), rng.integers(0, 8, 30)
    ids = np.arange(30)

    def run(r, s, e, budget=masked_send.REFERENCE_BUDGET):
        old, masked_send.REFERENCE_BUDGET = masked_send.REFERENCE_BUDGET, budget
        try:
            total, var, cnt = torch.zeros(8, LAYOUT.size), torch.zeros(8, 2), torch.zeros(8)
            plan = plan_links(r, s, e, 8, torch.device("cpu"), torch.float32)
            deliver(total, var, cnt, plan, theta, 0.3, 99, LAYOUT, True)
            return total, var
        finally:
            masked_send.REFERENCE_BUDGET = old
    whole = run(recv, send, ids)
    tiny = run(recv, send, ids, budget=1)                          # one link per chunk
    assert torch.equal(whole[0], tiny[0]) and torch.equal(whole[1], tiny[1])
    low = recv < 4                                                 # a "rank" holding rows 0-3
    part = run(recv[low], send[low], ids[low])
    assert torch.equal(part[0][:4], whole[0][:4]) and torch.equal(part[1][:4], whole[1][:4])
    assert not part[0][4:].any()


def test_masks_are_independent_bernoulli():
    """Every element sent with probability p, independently across links and positions (pairs sent
    together with probability p^2), counts per link Binomial(P, p); 5-sd bounds of the exact law."""
    layout = Layout((ParamSpec("w.weight", (64,), 0, 64),))
    links, size, p = 4000, 64, 0.2
    c0 = torch.arange(16).unsqueeze(0)
    words = philox4x32(c0, torch.arange(links).unsqueeze(1), torch.zeros_like(c0), torch.zeros_like(c0), 77)
    mask = (torch.stack(words, 2).flatten(1) < threshold(p)).numpy()            # (links, 64)
    b = blocks_of(layout, torch.device("cpu"))
    assert b.pick.tolist() == list(range(64))                                    # element j <- group j // 4, word j % 4

    def near(c, trials, q):
        return abs(c - trials * q) <= 5 * np.sqrt(trials * q * (1 - q))
    assert all(near(c, links, p) for c in mask.sum(0))
    assert near(mask.sum(), links * size, p)
    assert near((mask[0::2] & mask[1::2]).sum(), links // 2 * size, p * p)        # across links
    assert near((mask[:, :-1:2] & mask[:, 1::2]).sum(), links * size // 2, p * p)  # adjacent elements
    assert abs(mask.sum(1).var() / (size * p * (1 - p)) - 1) < 0.15


def test_limits_and_bad_p():
    assert threshold(1.0) == 2**32 and threshold(1e-12) == 0 and threshold(0.5) == 2**31
    with pytest.raises(ValueError):
        threshold(0.0)
    theta = torch.randn(3, LAYOUT.size, generator=torch.Generator().manual_seed(0))
    recv, send = np.array([0, 1, 2, 0]), np.array([1, 2, 0, 2])
    for p, want in ((1.0, lambda: theta[send]), (1e-12, lambda: theta[recv])):
        total, var, cnt = torch.zeros(3, LAYOUT.size), torch.zeros(3, 2), torch.zeros(3)
        deliver(total, var, cnt, plan_links(recv, send, np.arange(4), 3, torch.device("cpu"), torch.float32),
                theta, p, 5, LAYOUT, True)
        torch.testing.assert_close(total, torch.zeros(3, LAYOUT.size).index_add_(0, torch.from_numpy(recv), want()))


def test_one_op_per_tick_whatever_the_links():
    """Counted as the GPU runs it: the delivery's ops do not grow with the number of links."""
    theta = torch.randn(20, LAYOUT.size)
    rng = np.random.default_rng(1)

    def ops(e):
        recv, send = rng.integers(0, 20, e), rng.integers(0, 20, e)
        plan = plan_links(recv, send, np.arange(e), 20, torch.device("cpu"), torch.float32)
        total, var, cnt = torch.zeros(20, LAYOUT.size), torch.zeros(20, 2), torch.zeros(20)
        deliver(total, var, cnt, plan, theta, 0.3, 1, LAYOUT, True)        # warm
        _, c = count(deliver, total, var, cnt, plan, theta, 0.3, 1, LAYOUT, True)
        return c
    few, many = ops(10), ops(400)
    assert few.ops == many.ops and few.syncs == many.syncs == 0
    assert many.op_names["vecgossip::deliver_masked"] == 1


KERNEL_CHECK = """
import numpy as np, torch
from vecgossip.core.state import Layout
from vecgossip.engines.tick.masked_send import deliver, plan_links
from vecgossip.models import get_model
dev = 'cuda' if torch.cuda.is_available() else 'cpu'
import sys
for name, dtype in ((c.split(':')[0], getattr(torch, c.split(':')[1])) for c in sys.argv[1:]):
    layout = Layout.of(get_model(name).factory())
    theta = torch.randn(6, layout.size, generator=torch.Generator().manual_seed(0), dtype=dtype).to(dev)
    recv = np.array([1, 0, 2, 1, 3, 5, 0, 1]); send = np.array([0, 1, 1, 2, 4, 4, 5, 5])
    plan = plan_links(recv, send, np.arange(8), 6, torch.device(dev), dtype)
    out = []
    for kernel in ('torch', 'triton'):
        total = torch.randn(6, layout.size, generator=torch.Generator().manual_seed(3), dtype=dtype).to(dev)
        var, cnt = torch.zeros(6, len(layout.weights), dtype=dtype, device=dev), torch.zeros(6, dtype=dtype, device=dev)
        deliver(total, var, cnt, plan, theta, 0.3, 12345, layout, True, kernel=kernel)
        out.append((total.cpu(), var.cpu(), cnt.cpu()))
    (t0, v0, c0), (t1, v1, c1) = out
    assert torch.equal(t0, t1) and torch.equal(c0, c1), name
    torch.testing.assert_close(v0, v1, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=0)
print('ok', dev)
"""


@pytest.mark.parametrize("cases", [["mlp:float32", "mlp:float64"],
                                   pytest.param(["lenet:float64"], marks=pytest.mark.slow)])   # ~30 s interpreted
def test_the_triton_kernel_equals_its_torch_twin(cases):
    """The kernel on CUDA when present, else under Triton's CPU interpreter: buffer sums bit for
    bit (a receiver's links are added in order by one program), variances to float tolerance
    (block sums in another order)."""
    pytest.importorskip("triton")
    env = dict(os.environ)
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    res = subprocess.run([sys.executable, "-c", KERNEL_CHECK, *cases], env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.startswith("ok")
