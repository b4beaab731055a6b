"""DP-SGD rounds client by client (Abadi et al. 2016, Algorithm 1): a plain module per client,
per-sample gradients by torch.func (functional_call + vmap(grad)), each clipped to C
(min(1, C / (||g|| + 1e-6)), Opacus's factor), summed, plus sigma C z (z the client's noise stream,
privacy.dpsgd.node_noise: the random source both sides share, as they share the sampler), over the
batch's real sample count, into p.grad and torch.optim.SGD; then gossip x_i <- sum_j W_ij x_j with
W written out (reference.dfl.mixing_matrix), Q times, or for Muffliato's Chebyshev-accelerated
gossip (algorithm.chebyshev=true) the textbook recurrence x_{k+1} = w_{k+1} W x_k + (1 - w_{k+1}) x_{k-1}
(Cyffers et al. 2022, Algorithm 2; Scaman et al. 2017) with lambda_2 from numpy's eigenvalues of W."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from reference.dfl import mixing_matrix
from vecgossip.core.state import flatten, load_flat
from vecgossip.models import build as build_model
from vecgossip.network.topology import build
from vecgossip.privacy.dpsgd import node_noise


def run(cfg, engine, sampler, init: torch.Tensor) -> torch.Tensor:
    m, o, p = engine.m, cfg.optim, cfg.privacy
    layout = engine.layout
    nets = []
    for i in range(m):
        net = build_model(cfg.model.name, engine.train_data.shape, engine.train_data.num_classes).to(init.dtype)
        load_flat(net, layout, init[i])
        nets.append(net)
    opts = [torch.optim.SGD(n.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay) for n in nets]
    steps = [0] * m
    k = cfg.engine.local_steps
    for t in range(cfg.engine.rounds):
        lr = o.lr * o.lr_decay ** t
        for opt in opts:
            opt.param_groups[0]["lr"] = lr
        for _ in range(k):
            batch = sampler.next(torch.arange(m))
            for i in range(m):
                x, y, w = batch.materialise(engine.train_data, i, i + 1)
                keep = w[0] > 0
                x, y = x[0][keep], y[0][keep]
                private_grad(nets[i], layout, x, y, p.clip, p.noise_multiplier, cfg.seed, i, steps[i])
                opts[i].step()
                steps[i] += 1
        flat = [flatten(n) for n in nets]
        w = mixing_matrix(build(cfg.topology.name, m, cfg.topology.get("k"), cfg.seed))
        flat = gossip(cfg, w, flat)
        for i in range(m):
            load_flat(nets[i], layout, flat[i])
    return torch.stack([flatten(n) for n in nets])


def private_grad(net, layout, x, y, clip: float, sigma: float, seed: int, node: int, step: int) -> None:
    """Into each p.grad of ``net``: the clipped per-sample sum plus sigma C z, over the batch size."""
    params = {n: q.detach() for n, q in net.named_parameters()}

    def loss(ps, xb, yb):
        return F.cross_entropy(functional_call(net, ps, (xb[None],)), yb[None])
    g = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)          # {name: (B, *shape)}
    norms = torch.sqrt(sum(v.reshape(v.shape[0], -1).square().sum(1) for v in g.values()))
    factor = (clip / (norms + 1e-6)).clamp(max=1.0)
    first = next(iter(params.values()))
    z = node_noise(np.array([seed]), np.array([node]), np.array([step]), layout.params_size, first.dtype,
                   first.device)[0]
    for (name, q), s in zip(net.named_parameters(), layout.specs):
        summed = torch.einsum("b,b...->...", factor, g[name])
        q.grad = (summed + sigma * clip * z[s.start:s.stop].view(q.shape)) / len(y)


def gossip(cfg, w: np.ndarray, flat: list) -> list:
    m, q = len(flat), cfg.engine.gossip_steps

    def times_w(v):
        return [sum(float(w[i, j]) * v[j] for j in range(m) if w[i, j] != 0) for i in range(m)]
    if not (cfg.method_name == "muffliato" and cfg.algorithm.chebyshev):
        for _ in range(q):
            flat = times_w(flat)
        return flat
    lam = sorted(np.abs(np.linalg.eigvals(w)))[-2]          # |lambda_2| of a symmetric stochastic W
    prev, cur, omega = flat, times_w(flat), 1.0
    for k in range(1, q):
        omega = 2 / (2 - lam ** 2) if k == 1 else 1 / (1 - lam ** 2 * omega / 4)
        nxt = [omega * a + (1 - omega) * b for a, b in zip(times_w(cur), prev)]
        prev, cur = cur, nxt
    return cur
