"""The ``data`` group's options (``conf/data/*.yaml``). A field marked ``engine`` is read by that
engine only; setting it for the other one is refused (config/rules.py)."""
from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import Field

from vecgossip.core.options import Options, one_of
from vecgossip.data.registry import REGISTRY

TICK, ROUNDS = {"engine": "tick"}, {"engine": "rounds"}
TEXT = {"data": "text"}     # read for text data sets only (config/rules.py text_rules)


class DataConfig(Options):
    name: Annotated[str, one_of(lambda: REGISTRY)] = "mnist"   # a built-in data set or one of register_dataset
    root: Optional[str] = None            # the folder holding it (data_root, $VECGOSSIP_DATA, ./data)
    download: bool = True                 # fetch through torchvision when the files are not there
    alpha: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = None   # null: IID; else Dirichlet(alpha)
    batch_size: Annotated[int, Field(ge=1)] = 64
    augment: bool = True                  # the data set's training augmentation (CIFAR: crop + flip)
    eval_set: Literal["fixed100", "full", "local"] = Field("fixed100", json_schema_extra=TICK)
    local_eval_size: Annotated[int, Field(ge=1, json_schema_extra=TICK)] = 100
    sampler: Literal["label_mix", "prior_mix", "shards"] = Field("label_mix", json_schema_extra=TICK)
    partition: Optional[Literal["iid", "dirichlet", "pathological"]] = Field(None, json_schema_extra=ROUNDS)
    classes_per_client: Optional[Annotated[int, Field(ge=1)]] = Field(None, json_schema_extra=ROUNDS)
    min_samples: Optional[Annotated[int, Field(ge=1)]] = Field(None, json_schema_extra=ROUNDS)
    local_test_size: Optional[Annotated[int, Field(ge=1)]] = Field(None, json_schema_extra=ROUNDS)
    global_test_size: Optional[Annotated[int, Field(ge=1)]] = Field(None, json_schema_extra=ROUNDS)
    # text data (data=shakespeare; data/text.py, data/shakespeare.py); refused with image data
    split: Literal["roles", "iid"] = Field("roles", json_schema_extra=TEXT)   # one node per role | IID deal
    min_lines: Annotated[int, Field(ge=1, json_schema_extra=TEXT)] = 1        # speeches a role needs
    train_frac: Annotated[float, Field(gt=0, lt=1, json_schema_extra=TEXT)] = 0.8   # LEAF's -tf
    sample_seed: Annotated[int, Field(ge=0, json_schema_extra=TEXT)] = 0      # which roles (LEAF's --smplseed)
    text_file: Optional[str] = Field(None, json_schema_extra=TEXT)           # Gutenberg's complete works (pg100.txt)

    @property
    def partition_kind(self) -> str:
        """The round engine's partition: ``partition``, where null means iid when ``alpha`` is
        null, else dirichlet (as paper 1's alpha knob reads)."""
        if self.partition is None:
            return "iid" if self.alpha is None else "dirichlet"
        return self.partition
