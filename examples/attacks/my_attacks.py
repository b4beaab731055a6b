"""An attack of one's own with options and a global view (docs: Write your own, "An attack of your
own"): the Byzantine nodes collude, all sending the honest nodes' mean pushed one shared way.

    PYTHONPATH=examples/attacks python -m vecgossip method=dpsgd clients=16 topology=exponential \
        adversary.nodes=2 adversary.attack=my_attacks.Collude +adversary.params.scale=3
"""
from dataclasses import dataclass

import torch

from vecgossip.adversaries import Attack


@dataclass(frozen=True)
class ColludeParams:
    scale: float = 1.0     # how far from the honest mean, in units of the honest models' mean spread
    seed: int = 0          # the shared direction's seed: every Byzantine node pushes the same way


class Collude(Attack):
    """Every Byzantine node sends mean_h + scale * spread * u to every receiver: mean_h the honest
    models' mean, spread their mean distance to it, u one unit direction drawn from ``seed``."""

    Params = ColludeParams      # its own options: +adversary.params.scale=3, checked like an algorithm's
    global_view = True          # self.view: every node's model of this step, not only the receiver's
    reads = ()                  # it reads no adversary.epsilon / sigma / z (setting one is refused)

    def forge(self, block, byzantine, honest, generator):
        honest_models = self.view.honest_models().flatten(1)             # (h, P), read only
        mean = honest_models.mean(0)
        spread = (honest_models - mean).norm(dim=1).mean()
        u = torch.randn(mean.shape, generator=torch.Generator().manual_seed(self.options.seed), dtype=mean.dtype)
        sent = (mean + self.options.scale * spread * u.to(mean.device) / u.norm()).view_as(block.own[0])
        where = byzantine.view(*byzantine.shape, *[1] * (block.msgs.dim() - 2))   # (r, d, 1, ...)
        return torch.where(where, sent, block.msgs)
