"""Importing what a config names by dotted path (an algorithm, an attack): one line naming the
option if it cannot be imported."""
from __future__ import annotations


def import_target(target: str, option: str):
    """The object a dotted path names (module.attr[.attr...]); ConfigError naming ``option`` if it
    cannot be imported. (hydra.utils.get_object would do the lookup, but it logs a three-line
    error to stderr before raising: the CLI's bad-input answer must stay one line.)"""
    import importlib

    from vecgossip.core.errors import ConfigError
    if not isinstance(target, str) or "." not in target:
        raise ConfigError(f"{option}={target!r} must be a dotted path such as mypkg.module.ClassName")
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as err:
            if err.name is not None and not ".".join(parts[:cut]).startswith(err.name):
                raise ConfigError(f"{option}={target} cannot be imported: {err}") from None
            continue
        except Exception as err:   # noqa: BLE001 - the user's module raised while importing
            raise ConfigError(f"{option}={target} cannot be imported: {type(err).__name__}: {err}") from None
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            raise ConfigError(f"{option}={target} cannot be imported: module {'.'.join(parts[:cut])!r} "
                              f"has no {'.'.join(parts[cut:])!r}") from None
        return obj
    raise ConfigError(f"{option}={target} cannot be imported: no module named {parts[0]!r}")
