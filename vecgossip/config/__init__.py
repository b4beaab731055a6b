"""The config: the schema (:mod:`.schema`), the checks (:mod:`.checks`) and the generated
configuration reference (:mod:`.reference`). Bad input raises :class:`ConfigError`."""
from __future__ import annotations

import importlib
import warnings

from vecgossip.core.errors import ConfigError  # noqa: F401


def __getattr__(name: str):
    mod = importlib.import_module("vecgossip.config.checks")
    if hasattr(mod, name):
        warnings.warn(f"vecgossip.config.{name} moved to vecgossip.config.checks.{name} (the 0.3.0 layout); the old path "
                      "goes in 0.4.0", DeprecationWarning, stacklevel=2)
        return getattr(mod, name)
    raise AttributeError(f"module 'vecgossip.config' has no attribute {name!r}")
