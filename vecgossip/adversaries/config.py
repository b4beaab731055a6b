"""The ``adversary`` group's options."""
from __future__ import annotations

from typing import Annotated, Any, Optional, Union

from pydantic import Field

from vecgossip.core.options import Options

NodeCount = Annotated[int, Field(ge=0)]
NodeShare = Annotated[float, Field(gt=0, lt=1)]


class AdversaryConfig(Options):
    """Who is Byzantine and what they send (both engines)."""

    nodes: Union[None, NodeCount, NodeShare, list[NodeCount]] = None   # a count, a fraction of the nodes, or the node list (null: none)
    attack: str = "sign_flip"             # sign_flip | gaussian | alie | ipm | dissensus | label_flip | a dotted path to an Attack
    epsilon: Optional[Annotated[float, Field(ge=0, allow_inf_nan=False)]] = None   # ipm, dissensus: epsilon (null: the authors' 0.1 for ipm, 1.5 for dissensus)
    sigma: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0     # gaussian: the noise's standard deviation
    z: Optional[Annotated[float, Field(allow_inf_nan=False)]] = None    # ALIE: mu - z sigma (null: the paper's z_max from the node counts)
    params: dict[str, Any] = {}           # an attack's own options, checked against its Params dataclass (+adversary.params.NAME=...)

    @property
    def active(self) -> bool:
        return self.nodes is not None and self.nodes != 0 and self.nodes != []
