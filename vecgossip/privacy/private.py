"""A run's private training: what the round engine holds for ``privacy.*`` (config.PrivacyConfig):
the DP-SGD local step of a chunk (:mod:`.dpsgd`) with each client's own noise stream, the count of
each client's private steps (replicated on every rank, checkpointed) and its epsilon
(:mod:`.accounting`)."""
from __future__ import annotations

import numpy as np
import torch

from vecgossip.core.optim import momentum_sgd_
from vecgossip.core.errors import ConfigError
from vecgossip.privacy.accounting import node_epsilons, sigma_for
from vecgossip.privacy.config import PrivacyConfig
from vecgossip.privacy.dpsgd import node_noise, private_grads

Tensor = torch.Tensor


class PrivateTraining:
    """``cfg`` (active), the run's ``seed``, each client's sampling rate ``rates`` (m,) = B / n_i,
    the private steps each is planned to take (``planned`` (m,): what ``noise_multiplier=auto``
    spends ``target_epsilon`` over) and the smallest client's sample count (``smallest``: delta
    must be below its inverse unless ``allow_large_delta``)."""

    def __init__(self, cfg: PrivacyConfig, seed: int, rates: np.ndarray, planned: np.ndarray | None = None,
                 smallest: int | None = None, batch: int | None = None) -> None:
        self.seed, self.rates = int(seed), np.asarray(rates, dtype=float)
        self.expected = float(batch) if cfg.sampling == "poisson" and batch else None   # Poisson: divide by B
        if smallest is not None and cfg.delta * smallest >= 1 and not cfg.allow_large_delta:
            raise ConfigError(f"privacy.delta={cfg.delta:g} is not below 1/{smallest} = {1 / smallest:.3g} (the smallest "
                              f"node's {smallest} samples): a delta that large allows releasing a sample outright; "
                              "use a smaller delta, or privacy.allow_large_delta=true")
        self.sigma_from = "configured"
        if cfg.noise_multiplier == "auto":               # the strictest client sets it
            planned = np.asarray(planned if planned is not None else np.ones(len(rates)), dtype=np.int64)
            pairs = sorted(set(zip(self.rates.tolist(), planned.tolist())))
            sigma = max(sigma_for(cfg.target_epsilon, q, s, cfg.delta, cfg.accountant) for q, s in pairs if s > 0)
            cfg = cfg.model_copy(update={"noise_multiplier": float(sigma)})
            self.sigma_from = (f"auto: spends privacy.target_epsilon={cfg.target_epsilon:g} over the planned "
                               f"{int(planned.max())} steps of the most exposed node")
        self.cfg = cfg
        self.steps = np.zeros(len(rates), dtype=np.int64)      # private local iterations per client

    def update(self, forward, layout, theta: Tensor, momentum: Tensor, x: Tensor, y: Tensor, weight, lr: float,
               opt, clients: np.ndarray, iters: Tensor, seeds: np.ndarray | int | None = None) -> Tensor:
        """One DP-SGD local iteration of the chunk's clients (global indices ``clients``, their
        iteration counts ``iters`` before it; ``seeds``: each row's run seed, replicas' differ; default the run's) in place on theta/momentum (M, P), with the
        optimiser ``opt`` (momentum and weight decay act on the private gradient, as
        Opacus's optimiser wraps torch's SGD); returns their minibatch losses (M,)."""
        loss, grads = self.grads(forward, layout, theta, x, y, weight, clients, iters, seeds)
        for s, g in zip(layout.specs, grads):
            momentum_sgd_(theta[:, s.start:s.stop], momentum[:, s.start:s.stop], g, None,
                          opt.weight_decay, opt.momentum, lr)
        return loss

    def grads(self, forward, layout, theta: Tensor, x: Tensor, y: Tensor, weight, clients: np.ndarray, iters: Tensor,
              seeds: np.ndarray | int | None = None) -> tuple[Tensor, list[Tensor]]:
        """(losses (M,), [private gradient (M, *shape) per parameter]) of the chunk's clients (global
        indices ``clients``, iteration counts ``iters``): what an optimiser steps with (the round
        engine's SGD in :meth:`update`, the tick engine's Caffe SGD)."""
        noise = node_noise(self.seed if seeds is None else seeds, clients, iters.cpu().numpy(), layout.params_size,
                           theta.dtype, theta.device)
        return private_grads(forward, layout, theta, x, y, weight, self.cfg.clip, float(self.cfg.noise_multiplier),
                             noise, self.expected)

    def count(self, clients: np.ndarray) -> None:
        """``clients`` (global indices, every rank) took one private step."""
        np.add.at(self.steps, clients, 1)

    def epsilons(self, steps: np.ndarray | None = None) -> np.ndarray:
        """(m,) each client's epsilon at delta after ``steps`` (default: those taken)."""
        c = self.cfg
        return node_epsilons(float(c.noise_multiplier), self.rates, self.steps if steps is None else steps,
                             c.delta, c.accountant)

    def metrics(self) -> dict:
        eps = self.epsilons()
        return {"epsilon_max": float(eps.max()), "epsilon_mean": float(eps.mean())}

    def state(self) -> dict:
        return {"steps": self.steps.copy()}

    def load(self, d: dict) -> None:
        self.steps[:] = d["steps"]
