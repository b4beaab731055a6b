"""Data: the data-set registry and loading (:mod:`.registry`), a loaded data set on the device
(:mod:`.dataset`), paper 1's per-node samplers (:mod:`.sampling`), the round engine's fixed client
partitions (:mod:`.partition`) and augmentation (:mod:`.augment`)."""
from __future__ import annotations

import importlib
import warnings

# the names of 0.2.0's vecgossip.data module, now in the sub-modules (issue 36; gone in 0.4.0)
_OLD = {**dict.fromkeys(("DATA_ENV", "EVAL_SETS", "PIXEL_SCALE", "NUM_CLASSES", "resolve_root", "LabelIndex",
                         "Dataset", "eval_indices"), "vecgossip.data.dataset"),
        **dict.fromkeys(("SAMPLERS", "dirichlet_label_probs", "prior_mix_probs", "Shards", "sample_labels",
                         "sample_indices", "sample_node_batches"), "vecgossip.data.sampling"),
        "load_mnist": "vecgossip.data.registry"}


def __getattr__(name: str):
    if name in _OLD:
        warnings.warn(f"vecgossip.data.{name} moved to {_OLD[name]}.{name} (the 0.3.0 layout); the old path goes in 0.4.0",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(_OLD[name]), name)
    raise AttributeError(f"module 'vecgossip.data' has no attribute {name!r}")
