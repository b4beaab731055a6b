"""Differential privacy (issue 38): DP-SGD local steps batched over nodes and samples
(:mod:`.dpsgd`), per-node accounting by Opacus's RDP accountant (:mod:`.accounting`),
Muffliato's pairwise network DP bound (:mod:`.network`), and the ``privacy`` options
(:mod:`.config`)."""
from vecgossip.privacy.config import PrivacyConfig

__all__ = ["PrivacyConfig"]
