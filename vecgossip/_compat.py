"""Old import paths of 0.2.0 (the flat package), kept for one release (issue 36): importing
``vecgossip.stack``, ``vecgossip.sim``, ``vecgossip.compressors``, ... still works and gives the
module's new home, with a :class:`DeprecationWarning` that names it. Removed in 0.4.0.

The old modules are not files any more: a finder on ``sys.meta_path`` answers for their names
only. A module that was split (``vecgossip.outputs``, ``vecgossip.config``) answers with a
module whose attributes are looked up in its new homes, in order."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

# old dotted path -> the new module(s) its public names live in, first match wins
OLD = {
    "vecgossip.stack": ("vecgossip.core.state", "vecgossip.models.saved"),
    "vecgossip.optim": ("vecgossip.core.optim",),
    "vecgossip.metrics": ("vecgossip.core.metrics",),
    "vecgossip.guard": ("vecgossip.core.guard",),
    "vecgossip.faults": ("vecgossip.core.faults",),
    "vecgossip.correction": ("vecgossip.core.correction",),
    "vecgossip.kernels": ("vecgossip.core.kernels",),
    "vecgossip.models.layers": ("vecgossip.core.layers",),
    "vecgossip.datasets": ("vecgossip.data.registry",),
    "vecgossip.partition": ("vecgossip.data.partition",),
    "vecgossip.augment": ("vecgossip.data.augment",),
    "vecgossip.topology": ("vecgossip.network.topology",),
    "vecgossip.mixing": ("vecgossip.network.mixing",),
    "vecgossip.peers": ("vecgossip.network.peers",),
    "vecgossip.execution": ("vecgossip.models.execution",),
    "vecgossip.compressors": ("vecgossip.algorithms.compressors",),
    "vecgossip.engines.tick_transport": ("vecgossip.engines.tick.transport",),
    "vecgossip.engines.tick_measures": ("vecgossip.engines.tick.measures",),
    "vecgossip.engines.tick_state": ("vecgossip.engines.tick.state",),
    "vecgossip.buffer": ("vecgossip.engines.tick.buffer",),
    "vecgossip.compress": ("vecgossip.engines.tick.sparse_send",),
    "vecgossip.checkpoint": ("vecgossip.runtime.checkpoint",),
    "vecgossip.shard": ("vecgossip.runtime.shard",),
    "vecgossip.memory": ("vecgossip.runtime.memory",),
    "vecgossip.allocator": ("vecgossip.runtime.allocator",),
    "vecgossip.tracking": ("vecgossip.runtime.tracking",),
    "vecgossip.replicas": ("vecgossip.runtime.replicas",),
    "vecgossip.outputs": ("vecgossip.runtime.outputs", "vecgossip.core.files", "vecgossip.models.saved"),
    "vecgossip.schema": ("vecgossip.config.schema",),
    "vecgossip.confref": ("vecgossip.config.reference",),
    "vecgossip.sim": ("vecgossip.composition.root",),
    "vecgossip.setups": ("vecgossip.composition",),
    "vecgossip.setups.tick": ("vecgossip.composition.tick",),
    "vecgossip.setups.rounds": ("vecgossip.composition.rounds",),
    "vecgossip.demo": ("vecgossip.composition.demo",),
    "vecgossip.report_rounds": ("vecgossip.report.rounds",),
    "vecgossip.report_scaling": ("vecgossip.report.scaling",),
    "vecgossip.grouping": ("vecgossip.report.grouping",),
    "vecgossip.paper": ("vecgossip.report.paper",),
}
REMOVED_IN = "0.4.0"


class _Forward(types.ModuleType):
    """An old module: its attributes are its new homes' (looked up in order)."""

    def __init__(self, name: str, homes: tuple[str, ...]) -> None:
        super().__init__(name, f"Deprecated alias of {', '.join(homes)}.")
        self.__dict__["_homes"] = homes

    def __getattr__(self, attr: str):
        if attr.startswith("__") or attr == "_homes":      # the import machinery's probes: not forwarded
            raise AttributeError(attr)
        for home in self._homes:
            mod = importlib.import_module(home)
            if hasattr(mod, attr):
                return getattr(mod, attr)
        raise AttributeError(f"module {self.__name__!r} (now {', '.join(self._homes)}) has no attribute {attr!r}")

    def __dir__(self):
        return sorted({a for h in self._homes for a in dir(importlib.import_module(h))})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in OLD:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=fullname == "vecgossip.setups")

    def create_module(self, spec):
        homes = OLD[spec.name]
        warnings.warn(f"{spec.name} moved to {homes[0]} (the 0.3.0 layout); the old path goes in {REMOVED_IN}",
                      DeprecationWarning, stacklevel=3)
        if len(homes) == 1:
            return _alias(spec.name, homes[0])
        return _Forward(spec.name, homes)

    def exec_module(self, module):
        pass


def _alias(name: str, home: str) -> types.ModuleType:
    """A module object standing for ``home`` under the old ``name`` (its own object, so that
    Python's import machinery can set its spec without touching the real module)."""
    return _Forward(name, (home,))


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())   # before any other finder: the old names are ours alone
