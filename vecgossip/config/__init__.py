"""The config: one typed object per run (:mod:`.schema`, put together from the options each part
declares), the one boundary that validates a composed config into it (:mod:`.load`), the rules
between options (:mod:`.rules`), the short knobs (:mod:`.knobs`), the default job's rule
(:mod:`.default_job`) and the generated configuration reference (:mod:`.reference`). Bad input
raises :class:`ConfigError` with one line."""
from __future__ import annotations

import importlib
import warnings

from vecgossip.core.errors import ConfigError  # noqa: F401

# 0.2.0's vecgossip.config helpers, now elsewhere (gone in 0.4.0)
_OLD = {"pick_device": "vecgossip.runtime.device", "resolve_chunk": "vecgossip.models.chunks",
        "eval_images": "vecgossip.models.chunks", "composition_error": "vecgossip.config.load",
        "DEVICES": "vecgossip.config.schema"}


def __getattr__(name: str):
    if name in _OLD:
        warnings.warn(f"vecgossip.config.{name} moved to {_OLD[name]}.{name} (the 0.3.0 layout); the old path "
                      "goes in 0.4.0", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(_OLD[name]), name)
    raise AttributeError(f"module 'vecgossip.config' has no attribute {name!r}")
