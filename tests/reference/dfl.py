"""Paper 2's family (Shi et al. ICML 2023, Algorithms 1-2), client by client with plain modules and
torch.optim.SGD: D-PSGD (one local step), DFedAvg(M) (K local steps, momentum), DFedSAM (SAM
local steps: ascend to y + rho g / ||g||, re-take the gradient), DFedSAM-MGS (Q gossip steps),
FedAvg / FedSAM (a server averages the participants by sample size). Gossip is x_i <- sum_j W_ij
x_j with W's Metropolis-Hastings weights written out here."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from vecgossip.core.state import flatten, load_flat
from vecgossip.models import build as build_model
from vecgossip.network.topology import RandomGraphs, build


def mixing_matrix(graph) -> np.ndarray:
    """Metropolis-Hastings weights written out: W_ij = 1/(max(d_i, d_j)+1) on edges, W_ii the rest."""
    deg = np.zeros(graph.n)
    for i, j in graph.edges:
        deg[i] += 1
        deg[j] += 1
    w = np.zeros((graph.n, graph.n))
    for i, j in graph.edges:
        w[i, j] = w[j, i] = 1.0 / (max(deg[i], deg[j]) + 1)
    w[np.diag_indices(graph.n)] = 1.0 - w.sum(1)
    return w


SAM_METHODS = ("dfedsam", "dfedsam_mgs", "fedsam")     # the papers' SAM local steps
SERVER_METHODS = ("fedavg", "fedsam")                  # a central server, no graph


def run(cfg, engine, sampler, rng, init: torch.Tensor, faults=None) -> torch.Tensor:
    """Two rounds of the method, client by client with plain modules and torch.optim.SGD. With
    ``faults`` (seeded like the engine's): offline clients neither train nor send nor receive, each
    message (W's off-diagonal entries, row by row; uploads, then downloads) may be lost, and a
    receiver uses its own model in place of a lost one."""
    m, o, e = engine.m, cfg.optim, cfg.engine
    layout = engine.layout
    own_stats = OmegaConf.select(cfg, "model.average_buffers") is False    # BatchNorm statistics stay home
    nets = []
    for i in range(m):
        net = build_model(cfg.model.name, engine.train_data.shape, engine.train_data.num_classes,
                          OmegaConf.select(cfg, "model.norm")).to(init.dtype)
        load_flat(net, layout, init[i])
        nets.append(net)
    bns = [[b for b in net.modules() if isinstance(b, torch.nn.BatchNorm2d)] for net in nets]
    opts = [torch.optim.SGD(net.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
            for net in nets]
    sizes = sampler.sizes.tolist()
    steps = [e.local_steps if e.local_steps is not None else e.local_epochs * -(-n // cfg.data.batch_size)
             for n in sizes]
    for t in range(e.rounds):
        lr = o.lr * o.lr_decay ** t
        for opt in opts:
            for group in opt.param_groups:
                group["lr"] = lr
            if o.reset_momentum:                                  # a fresh optimiser state every round
                opt.state.clear()
        online = [True] * m if faults is None else faults.online(t).tolist()
        if e.participation < 1:
            k = max(1, int(round(e.participation * m)))
            part = sorted(rng.choice(m, k, replace=False).tolist())
        else:
            part = list(range(m))
        part = [i for i in part if online[i]]
        for s in range(max(steps[i] for i in part)):
            act = [i for i in part if steps[i] > s]
            batch = sampler.next(torch.tensor(act))
            for j, i in enumerate(act):
                x, y, w = batch.materialise(engine.train_data, j, j + 1)
                keep = w[0] > 0
                x, y = x[0][keep], y[0][keep]                     # the client's real samples only
                net, opt = nets[i], opts[i]
                opt.zero_grad()
                F.cross_entropy(net(x), y).backward()
                if o.sam or cfg.method_name in SAM_METHODS:                                         # SAM: ascend to y + rho g/||g||, re-take the gradient
                    with torch.no_grad():
                        norm = torch.sqrt(sum(p.grad.square().sum() for p in net.parameters()))
                        eps = [o.rho * p.grad / (norm + 1e-12) for p in net.parameters()]
                        for p, d in zip(net.parameters(), eps):
                            p.add_(d)
                    opt.zero_grad()
                    for b in bns[i]:                              # davda54/sam: running statistics
                        b.momentum = 0.0                          # frozen in the second pass
                    F.cross_entropy(net(x), y).backward()
                    for b in bns[i]:
                        b.momentum = 0.1
                    with torch.no_grad():
                        for p, d in zip(net.parameters(), eps):
                            p.sub_(d)
                opt.step()
        flat = [flatten(net) for net in nets]
        arrives = (lambda: True) if faults is None else (lambda: bool(faults.kept(1)[0]))  # noqa: E731
        if cfg.method_name in SERVER_METHODS:
            got = [i for i in part if arrives()]                        # uploads
            if got:
                server = sum(sizes[i] * flat[i] for i in got) / sum(sizes[i] for i in got)
            flat = [server.clone() if (arrives() and online[i]) else flat[i] for i in range(m)]   # downloads
        else:
            graph = (RandomGraphs(m, cfg.topology.k, cfg.seed).at(t) if cfg.topology.name == "random"
                     else build(cfg.topology.name, m, cfg.topology.get("k"), cfg.seed))
            w = mixing_matrix(graph)
            for _ in range(e.gossip_steps):
                new = []
                for i in range(m):
                    acc = float(w[i, i]) * flat[i]
                    for j in range(m):
                        if j != i and w[i, j] != 0:
                            ok = arrives() and online[i] and online[j]
                            acc = acc + float(w[i, j]) * (flat[j] if ok else flat[i])
                    new.append(acc)
                flat = new
        if own_stats:
            flat = [torch.cat([f[:layout.params_size], flatten(net)[layout.params_size:]]) for f, net in zip(flat, nets)]
        for i in range(m):
            load_flat(nets[i], layout, flat[i])
    return torch.stack([flatten(net) for net in nets])
