"""Which options tell a report's runs apart (``python -m vecgossip.report``).

A sweep over any option (``rho``, ``optim.lr``, ``gossip_steps``, ``data.sampler``, a plug-in's
hyperparameter) must not pool its cells as if they were seeds. Seeds are pooled only when every
other option is equal: :func:`splitting_options` finds the options, beyond a table's own keys,
that take more than one value inside one of the table's cells, and :func:`add_option_column`
names each run's values of them ("optim.rho=0.01"), the extra key the tables group by and print."""
from __future__ import annotations

import pandas as pd

# options that label, locate or schedule a run without changing what it computes (``device``: the
# same computation on another processor, its rounding aside: a CPU seed and a GPU seed pool)
IGNORED = ("seed", "name", "device", "progress", "resume", "checkpoint_every", "checkpoint_seconds", "logger",
           "save_models", "data.root", "data_root", "data.download", "compare", "compare_ticks", "method_name",
           "replicas", "distributed.enabled", "distributed.backend", "distributed.exchange", "on_divergence",
           "engine.on_divergence", "engine.malloc", "engine.train_chunk", "engine.eval_chunk")


def flat(cfg: dict, prefix: str = "") -> dict[str, str]:
    """A resolved config as dotted keys -> comparable text values (lists included)."""
    out: dict[str, str] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flat(v, key + "."))
        else:
            out[key] = repr(v) if not isinstance(v, str) else v
    return out


def splitting_options(configs: list[dict], cells: list[tuple]) -> list[str]:
    """The dotted options that differ between runs of one cell (``cells[i]``: run i's table key),
    in config order. An option missing from a run (a summary written before it existed) had its
    default then (:func:`with_defaults`); a top-level short knob that only mirrors a group's
    option (``alpha`` for ``data.alpha``) is named once, by the group's dotted name; a CPU run's
    ``precision=tf32`` is its ``fp32`` (a CPU has no TF32: runtime/precision.py)."""
    return _splitting(with_defaults([computed(flat(c)) for c in configs]), cells)


def with_defaults(flats: list[dict[str, str]]) -> list[dict[str, str]]:
    """Each run's missing options (those some other run records) filled with their defaults: an
    option is added with a default that keeps the behaviour from before it existed, so a summary
    written before ``clock.barrier`` existed ran with ``clock.barrier=global``. The defaults are
    the run's method preset's (``method_name``; the base config's where it names none), composed
    once per method; an option no preset knows stays missing (compared among the runs that have it)."""
    keys = set().union(*flats) if flats else set()
    known: dict[str, dict[str, str]] = {}
    out = []
    for f in flats:
        missing = keys - f.keys()
        if missing:
            method = f.get("method_name")
            if method not in known:
                known[method] = preset_defaults(method)
            d = known[method]
            f = {**f, **{k: d[k] for k in missing if k in d}}
        out.append(f)
    return out


def preset_defaults(method: str | None) -> dict[str, str]:
    """The flat resolved config of ``method=<method>`` with nothing else set (the base config if
    that is no method preset)."""
    from hydra.errors import HydraException

    from vecgossip.config.reference import raw_defaults
    try:
        cfg = raw_defaults(method, resolve=True)
    except HydraException:
        cfg = raw_defaults(None, resolve=True)
    return computed(flat(cfg))


def computed(f: dict[str, str]) -> dict[str, str]:
    """What a flat config computes: on a CPU (or a summary from before ``device`` was recorded:
    runs were on the CPU) tf32 is fp32."""
    if f.get("precision") == "tf32" and not f.get("device", "cpu").startswith("cuda"):
        return {**f, "precision": "fp32"}
    return f


def _splitting(flats: list[dict[str, str]], cells: list[tuple]) -> list[str]:
    keys = list(dict.fromkeys(k for f in flats for k in f))
    found: list[str] = []
    for key in keys:
        if key in IGNORED or any(key.startswith(i + ".") for i in IGNORED):
            continue
        by_cell: dict[tuple, set] = {}
        for f, cell in zip(flats, cells):
            if key in f:
                by_cell.setdefault(cell, set()).add(f[key])
        if any(len(v) > 1 for v in by_cell.values()):
            found.append(key)
    mirrors = {k for k in found if "." not in k and any(_same(flats, k, d) for d in found if "." in d)}
    return [k for k in found if k not in mirrors]


def _same(flats: list[dict], a: str, b: str) -> bool:
    return all(f.get(a) == f.get(b) for f in flats)


def add_option_column(runs: pd.DataFrame, configs: list[dict], keys: list[str]) -> list[str]:
    """Adds the ``options`` column to ``runs`` (one row per config) for a table grouped by ``keys``:
    each run named by the splitting options of ITS cell (an option that splits another cell is no
    name here); returns every splitting option."""
    if runs.empty:
        runs["options"] = []
        return []
    cells = [tuple(str(v) for v in r) for r in runs[keys].itertuples(index=False)]
    flats = with_defaults([computed(flat(c)) for c in configs])
    options = _splitting(flats, cells)
    own = {cell: [k for k in options if len({f.get(k, "?") for f, c in zip(flats, cells) if c == cell}) > 1]
           for cell in set(cells)}
    runs["options"] = [", ".join(f"{k}={f.get(k, '?')}" for k in own[c]) for f, c in zip(flats, cells)]   # "" for none
    return options
