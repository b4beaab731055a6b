"""An adversary of a run: its Byzantine nodes (drawn once from the run's seed) and its attack, which
rewrites the blocks of messages a gather hands to each receiver (engines/gather.py)."""
from __future__ import annotations


import inspect

import numpy as np
import torch

from vecgossip.adversaries.attacks import ATTACKS, Attack
from vecgossip.adversaries.config import AdversaryConfig


def byzantine_nodes(nodes, n: int, seed: int) -> np.ndarray:
    """(n,) bool: the Byzantine nodes. ``nodes``: a count or a fraction (that many, drawn without
    replacement from the stream (seed, 9)), or a list of node indices."""
    out = np.zeros(n, dtype=bool)
    if nodes is None:
        return out
    if isinstance(nodes, list):
        out[np.asarray(nodes, dtype=np.int64)] = True
        return out
    count = nodes if isinstance(nodes, int) else int(round(nodes * n))
    out[np.random.default_rng([seed, 9]).choice(n, count, replace=False)] = True
    return out


def attack_class(name: str) -> type:
    """The built-in attack ``name``, or a user's ``Attack`` subclass by dotted path."""
    if name in ATTACKS:
        return ATTACKS[name]
    if "." not in name:
        from vecgossip.core.options import did_you_mean
        raise ValueError(f"adversary.attack={name} is not an attack; built in: {', '.join(ATTACKS)}, or a dotted "
                         f"path to an Attack subclass{did_you_mean(name, ATTACKS)}")
    from vecgossip.core.imports import import_target
    cls = import_target(name, "adversary.attack")
    if isinstance(cls, type) and issubclass(cls, Attack) and inspect.isabstract(cls):
        raise ValueError(f"adversary.attack={name}: {cls.__name__} does not define forge(block, byzantine, honest, "
                         "generator)")
    if not (isinstance(cls, type) and issubclass(cls, Attack)):
        raise ValueError(f"adversary.attack={name} is not a vecgossip.adversaries.attacks.Attack subclass; "
                         f"built in: {', '.join(ATTACKS)}")
    return cls


class Adversary:
    """``byzantine`` (n,) bool; ``attack`` what they send; its noise from the stream (seed, 10)."""

    def __init__(self, cfg: AdversaryConfig, n: int, seed: int, device="cpu") -> None:
        self.cfg, self.n = cfg, n
        self.byzantine = byzantine_nodes(cfg.nodes, n, seed)
        self.attack = attack_class(cfg.attack)(cfg, n, int(self.byzantine.sum()))
        key = int(np.random.default_rng([seed, 10]).integers(2**62))
        self.generator = torch.Generator(device=device).manual_seed(key)
        self.mask = torch.from_numpy(self.byzantine).to(device)

    @property
    def honest(self) -> np.ndarray:
        return ~self.byzantine

    def look(self, models: torch.Tensor) -> None:
        """The step's every node's rows (n, ...) for an attack with a global view (read only)."""
        if self.attack.global_view:
            from vecgossip.adversaries.attacks import View
            self.attack.view = View(models, ~self.mask)

    def forge(self, block):
        """The block with its Byzantine senders' messages replaced (receivers that are Byzantine
        themselves keep theirs: they are not measured)."""
        byzantine = self.mask[block.senders] & block.mask
        if not bool(byzantine.any()) or self.attack.poisons_data:
            return block
        honest = ~self.mask[block.senders] & block.mask
        return block.replace(msgs=self.attack.forge(block, byzantine, honest, self.generator))

    def state(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load(self, d: dict) -> None:
        self.generator.set_state(d["generator"].cpu() if self.generator.device.type == "cpu" else d["generator"])
