"""Adversaries, independent of the algorithm (issue 37): which nodes are Byzantine
(``adversary.nodes``: a count, a fraction or a list, drawn from the run's seed) and what they send
(``adversary.attack``): sign flipping, Gaussian noise, ALIE (Baruch et al. 2019), IPM (Xie et al.
2020), dissensus (He, Karimireddy, Jaggi 2022), label flipping (data poisoning), mimic
(Karimireddy, He, Jaggi 2022), or a user's own :class:`~vecgossip.adversaries.Attack` by dotted
path, on both engines. An attack acts on what a Byzantine node sends to each receiver and may read
that receiver's honest messages (omniscient) and, with ``global_view``, every node's model of the
step (:class:`View`); Byzantine nodes are left out of every honest metric.

Public: :class:`Attack` (subclass it for an attack of your own), :class:`View` (what a global
view holds) and :class:`AdversaryConfig` (the ``adversary`` group's options, an attack's
``params``)."""
from vecgossip.adversaries.attacks import Attack, View
from vecgossip.adversaries.config import AdversaryConfig

__all__ = ["AdversaryConfig", "Attack", "View"]
