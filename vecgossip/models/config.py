"""The ``model`` group's options (``conf/model/*.yaml``), read when a run's models are built."""
from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import Field

from vecgossip.core.options import Options, one_of
from vecgossip.core.state import INIT_SCHEMES
from vecgossip.models import MODELS, NORMS
from vecgossip.models.execution import EXECS


class ModelConfig(Options):
    name: Annotated[str, one_of(lambda: MODELS)] = "lenet"   # a built-in model or one of register_model
    impl: Literal["explicit", "vmap"] = "explicit"   # explicit: the hand-batched fast path where one exists
    exec: Annotated[str, one_of(lambda: EXECS)] = "auto"     # batched | per_client | auto: the faster, measured
    init: Annotated[str, one_of(lambda: INIT_SCHEMES)] = "caffe_xavier"   # initial weights
    shared_init: bool = False             # every node starts from one model
    broadcast_init: bool = False          # every node starts from the average of all initial models (Fig. 6)
    norm: Optional[Annotated[str, one_of(lambda: NORMS)]] = None   # ResNet-18 / VGG-11: batch | group
    width: Optional[Annotated[int, Field(ge=1)]] = None   # char_lstm: hidden units (256) | char_transformer: width (64)
    average_buffers: Optional[bool] = None   # round engine: BatchNorm statistics gossiped with the model
