"""The per-client loop baseline, written as a competent PyTorch user writes it (DESIGN.md "Fair
comparisons"): one plain nn.Module and one torch.optim.SGD per client, the faster of fused and
foreach SGD (measured here, in the same process), default ``zero_grad()`` (set_to_none), conv models
in channels_last (measured faster on this CPU), SAM written out per client, and gossip as one
matrix product on the clients' flattened parameters into a buffer kept across rounds (reshape +
cat, copied back per parameter: parameters_to_vector's view(-1) refuses channels_last weights).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from common import interleaved
from vecgossip.core.state import Layout, load_flat, module_tensors


def _sgd(named: list, lr: float, momentum: float, weight_decay: float, impl: str,
         bias_lr_mult: float = 1.0) -> torch.optim.SGD:
    """torch.optim.SGD over ``named`` (name, parameter) pairs, fused or foreach; with
    ``bias_lr_mult`` != 1 the biases get their own group at that multiple of the lr (Caffe's
    lr_mult 2 on biases, paper 1)."""
    groups = [p for _, p in named]
    if bias_lr_mult != 1.0:
        groups = [{"params": [p for n, p in named if not n.endswith("bias")], "lr": lr},
                  {"params": [p for n, p in named if n.endswith("bias")], "lr": lr * bias_lr_mult}]
    if impl == "fused":
        return torch.optim.SGD(groups, lr=lr, momentum=momentum, weight_decay=weight_decay, fused=True)
    return torch.optim.SGD(groups, lr=lr, momentum=momentum, weight_decay=weight_decay, foreach=True)


def fastest_sgd(factory, x: torch.Tensor, y: torch.Tensor, momentum: float, channels_last: bool,
                reps: int = 5, bias_lr_mult: float = 1.0) -> tuple[str, dict]:
    """Time one training step with fused and with foreach SGD, interleaved; return the faster."""
    fns = {}
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    for impl in ("fused", "foreach"):
        net = factory().to(x.device)
        if channels_last:
            net = net.to(memory_format=torch.channels_last)
        opt = _sgd(list(net.named_parameters()), 0.01, momentum, 5e-4, impl, bias_lr_mult)

        def step(net=net, opt=opt):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
        fns[impl] = step
    t = interleaved(fns, reps=reps, device=x.device)
    return min(t, key=lambda k: t[k]["median"]), t


class LoopClients:
    """m plain models, each with its own optimiser; ``theta`` (m, P) gives the initial models.

    ``flat=True``: the clients' parameters are views into one (m, P) buffer (so gossip is one
    matrix product and one copy, nothing stacked); the weights are then NCHW (only the inputs are
    channels_last). ``flat=False``: modules converted to channels_last, and gossip stacks their
    parameters each round. benchmarks/rounds.py measures both and keeps the faster."""

    def __init__(self, factory, theta: torch.Tensor, lr: float, momentum: float, weight_decay: float,
                 sgd_impl: str, channels_last: bool, rho: float | None = None, flat: bool = False,
                 bias_lr_mult: float = 1.0) -> None:
        self.nets, self.opts = [], []
        self.channels_last, self.rho = channels_last, rho
        self.flat = theta.clone() if flat else None
        self._mixed = self._stacked = None                     # gossip's buffers, made once, kept across rounds
        for i, row in enumerate(theta):
            net = factory().to(theta.device)
            layout = self.layout = Layout.of(net)
            if flat:     # parameters and BatchNorm running statistics: views of the flat row
                for s, t in zip(layout.specs + layout.buffers, module_tensors(net, layout)):
                    t.data = self.flat[i, s.start:s.stop].view(s.shape)
            else:
                load_flat(net, layout, row)
                if channels_last:
                    net = net.to(memory_format=torch.channels_last)
            self.nets.append(net)
            self.opts.append(_sgd(list(net.named_parameters()), lr, momentum, weight_decay, sgd_impl, bias_lr_mult))

    def step(self, i: int, x: torch.Tensor, y: torch.Tensor) -> None:
        """One local iteration of client i: SGD, or SAM when ``rho`` is set."""
        net, opt = self.nets[i], self.opts[i]
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        if self.rho is not None:
            params = [p for p in net.parameters()]
            with torch.no_grad():
                norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))
                eps = torch._foreach_mul([p.grad for p in params], self.rho / (float(norm) + 1e-12))
                torch._foreach_add_(params, eps)
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            with torch.no_grad():
                torch._foreach_sub_(params, eps)
        opt.step()

    def gossip(self, w: torch.Tensor) -> None:
        """x <- W x over the clients' flattened parameters (and BatchNorm running statistics, as the
        batched engine's default ``average_buffers``), W dense or CSR. The product goes into a
        buffer kept across rounds, as a competent user keeps it: a fresh (m, P) result each round
        is a fresh mmap of the whole state (the CNN at m = 100: 351 MB), 491 ms and 171,590 page
        faults a round against 121 ms and none on a 2-core AMD EPYC (benchmarks/loop_gossip.py,
        RESULTS.md "The loop's gossip made fair")."""
        with torch.no_grad():
            if self._mixed is None:
                self._mixed = torch.empty(len(self.nets), self.layout.size, device=w.device)
            if self.flat is not None:
                self.flat.copy_(self._mixed.addmm_(w, self.flat, beta=0.0))
                return
            if self._stacked is None:
                self._stacked = torch.empty_like(self._mixed)
            state = [module_tensors(net, self.layout) for net in self.nets]
            for ts, row in zip(state, self._stacked):
                torch.cat([t.reshape(-1) for t in ts], out=row)
            for ts, row in zip(state, self._mixed.addmm_(w, self._stacked, beta=0.0)):
                start = 0
                for t in ts:
                    t.copy_(row[start:start + t.numel()].view(t.shape))
                    start += t.numel()
