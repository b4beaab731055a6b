"""What a Byzantine node sends. An attack rewrites a block of messages (:class:`vecgossip.algorithms.Block`:
a chunk of receivers, each with its messages (r, d, ...)): the entries whose sender is Byzantine
are replaced, per receiver, from what that receiver holds and hears from honest neighbours
(omniscient attacks read them). Definitions as in He, Karimireddy and Jaggi's code
(epfml/byzantine-robust-decentralized-optimizer, ``codes/attacks.py``), with the receiver as the
target: sign flipping sends -x_b; ALIE sends mu - z sigma over the receiver's and its honest
neighbours' models (sigma: unbiased std per coordinate; z: z_max of n and f); IPM sends
-epsilon mu over the same; dissensus sends x_i - epsilon sum_{j honest} w_ij (x_j - x_i) /
sum_{b Byzantine} w_ib, which pushes the receiver away from its honest neighbours."""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

Tensor = torch.Tensor


@dataclass
class View:
    """The global view of an attack that asks for it (``global_view = True``): every node's current
    row of the tensor being sent or gathered this step, ``models`` (n, ...), and which nodes are
    honest, ``honest`` (n,) bool. Read only: what the attack returns is its only effect."""

    models: Tensor
    honest: Tensor

    def honest_models(self) -> Tensor:
        """(h, ...) the honest nodes' rows, in node order."""
        return self.models[self.honest]


class Attack(ABC):
    """Base class: ``forge(block, byzantine, honest, generator)`` returns the block's messages with
    the Byzantine senders' entries replaced (``byzantine``, ``honest``: (r, d) masks of the block's
    messages). Before forging, a message's entry holds what its sender would honestly send (the
    Byzantine senders' too: their own current model); ``block.own`` is each receiver's model.
    ``params``: the adversary's options (``self.epsilon`` is adversary.epsilon, or the attack's
    default when null); ``options``: the attack's own ``Params`` filled from adversary.params;
    ``view`` (:class:`View`, when ``global_view``): every node's model at this step, not only
    the receiver's neighbourhood; ``n``, ``f``: nodes and Byzantine nodes."""

    poisons_data = False        # label flipping: the Byzantine nodes' training labels are flipped instead
    epsilon = 0.0               # adversary.epsilon when null (the attack's authors' value)
    reads = ("epsilon", "sigma", "z")   # the adversary.* options it reads (set by the command line and
    #                                     read by nothing else: refused); a subclass names its own
    Params = None               # a dataclass of the attack's own options (adversary.params); None: none
    global_view = False         # True: the engine sets ``self.view`` (every node's model) before each forge

    def __init__(self, params, n: int, f: int) -> None:
        self.params, self.n, self.f = params, n, f
        if params.epsilon is not None:
            self.epsilon = params.epsilon
        own = dict(params.params or {})
        name = f"{type(self).__module__}.{type(self).__qualname__}"
        if self.Params is None:
            if own:
                from vecgossip.core.errors import ConfigError
                raise ConfigError(f"unknown option adversary.params.{next(iter(own))}; {name} takes no options of its "
                                  "own (an attack declares them in its Params dataclass)")
            self.options = None
        else:
            from vecgossip.core.options import dataclass_params
            self.options = dataclass_params(self.Params, own, "adversary.params", name)
        self.view: View | None = None

    @abstractmethod
    def forge(self, block, byzantine: Tensor, honest: Tensor, generator: torch.Generator) -> Tensor:
        """The block's messages (r, d, ...) with the Byzantine entries replaced."""


def _expand(mask: Tensor, like: Tensor) -> Tensor:
    return mask.view(*mask.shape, *([1] * (like.dim() - 2)))


def honest_stats(block, honest: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per receiver: (count, mean, unbiased std) over its own model and its honest messages."""
    h = _expand(honest, block.msgs).to(block.msgs.dtype)
    count = 1 + honest.sum(1).to(block.msgs.dtype)                                  # (r,)
    shape = (-1, *([1] * (block.own.dim() - 1)))
    total = block.own + (h * block.msgs).sum(1)
    mean = total / count.view(shape)
    sq = (block.own - mean).square() + (h * (block.msgs - mean.unsqueeze(1)).square()).sum(1)
    std = (sq / (count - 1).clamp(min=1).view(shape)).sqrt()
    return count, mean, std


def replace(block, byzantine: Tensor, value: Tensor) -> Tensor:
    """The block's messages with every Byzantine entry of receiver i set to ``value[i]``."""
    return torch.where(_expand(byzantine, block.msgs), value.unsqueeze(1).expand_as(block.msgs), block.msgs)


class SignFlip(Attack):
    reads = ()               # the adversary.* options it reads

    def forge(self, block, byzantine, honest, generator):
        return torch.where(_expand(byzantine, block.msgs), -block.msgs, block.msgs)


class Gaussian(Attack):
    reads = ("sigma",)               # the adversary.* options it reads

    def forge(self, block, byzantine, honest, generator):
        noise = torch.randn(block.msgs.shape, generator=generator, dtype=block.msgs.dtype, device=block.msgs.device)
        return torch.where(_expand(byzantine, block.msgs), self.params.sigma * noise, block.msgs)


class ALIE(Attack):
    reads = ("z",)               # the adversary.* options it reads

    def z(self) -> float:
        """Baruch et al.'s z_max: s = floor(n/2 + 1) - f supporters, z = Phi^-1((n - f - s) / (n - f))."""
        if self.params.z is not None:
            return float(self.params.z)
        s = math.floor(self.n / 2 + 1) - self.f
        from scipy.stats import norm        # here: importing scipy.stats costs every run 0.7 s
        return float(norm.ppf((self.n - self.f - s) / (self.n - self.f)))

    def forge(self, block, byzantine, honest, generator):
        _, mean, std = honest_stats(block, honest)
        return replace(block, byzantine, mean - self.z() * std)


class IPM(Attack):
    reads = ("epsilon",)               # the adversary.* options it reads

    epsilon = 0.1               # He et al.'s code (codes/attacks.py: IPMAttack(epsilon=0.1))

    def forge(self, block, byzantine, honest, generator):
        _, mean, _ = honest_stats(block, honest)
        return replace(block, byzantine, -self.epsilon * mean)


class Dissensus(Attack):
    reads = ("epsilon",)               # the adversary.* options it reads

    epsilon = 1.5               # He et al.'s experiments ("dissensus1.5")

    def forge(self, block, byzantine, honest, generator):
        w = block.weight.to(block.msgs.dtype)
        h = _expand(honest, block.msgs).to(block.msgs.dtype)
        pull = (_expand(w, block.msgs) * h * (block.msgs - block.own.unsqueeze(1))).sum(1)
        byz_w = (w * byzantine).sum(1).clamp(min=torch.finfo(w.dtype).tiny)
        shape = (-1, *([1] * (block.own.dim() - 1)))
        return replace(block, byzantine, block.own - self.epsilon * pull / byz_w.view(shape))


class LabelFlip(Attack):
    """Data poisoning: the Byzantine nodes train on labels C - 1 - y and send what they trained."""
    reads = ()               # the adversary.* options it reads


    poisons_data = True

    def forge(self, block, byzantine, honest, generator):
        return block.msgs


@dataclass(frozen=True)
class MimicParams:
    target: int | None = None     # the honest node every Byzantine node copies (null: the lowest-indexed honest node)


class Mimic(Attack):
    """Mimic (Karimireddy, He and Jaggi 2022, "Byzantine-robust learning on heterogeneous datasets
    via bucketing"): every Byzantine node sends the model of one fixed honest node, to every
    receiver, so that node's data is over-represented (harmful when data is heterogeneous; no
    robust rule can tell an honest model from its copy). The paper picks the node that maximises
    the honest models' variance along a direction learned over the first rounds; here it is fixed
    (``adversary.params.target``). Needs the global view: the target need not be a neighbour."""

    reads = ()
    Params = MimicParams
    global_view = True

    def forge(self, block, byzantine, honest, generator):
        target = self.options.target
        if target is None:
            target = int(torch.nonzero(self.view.honest)[0])
        elif not bool(self.view.honest[target]):
            from vecgossip.core.errors import ConfigError
            raise ConfigError(f"adversary.params.target={target} is a Byzantine node: mimic copies an honest one")
        copy = self.view.models[target].unsqueeze(0).expand_as(block.own)
        return replace(block, byzantine, copy)


ATTACKS = {"sign_flip": SignFlip, "gaussian": Gaussian, "alie": ALIE, "ipm": IPM, "dissensus": Dissensus,
           "label_flip": LabelFlip, "mimic": Mimic}
