"""The configuration reference, generated: every option of every config group with its type (from
the schema, :mod:`vecgossip.config.schema`, and each algorithm's ``Params``), its default (the shipped
YAML, interpolations as written), the values allowed (the registries and choice lists the checks
use) and its description (the comment beside it in the shipped YAML). Nothing here is written by
hand, so the reference cannot drift from the code:

    python -m vecgossip.config.reference > configuration.md     # what the docs site renders (docs/hooks.py)
"""
from __future__ import annotations

import dataclasses
import re
import sys
import typing
from pathlib import Path

CONF = Path(__file__).resolve().parents[1] / "conf"
GROUPS = ("model", "data", "topology", "optim", "engine", "averaging", "algorithm", "method", "experiment")


def allowed() -> dict[str, str]:
    """The values each choice option takes, from the lists the checks use."""
    from vecgossip.runtime import allocator, shard, tracking
    from vecgossip.data import dataset, partition, sampling
    from vecgossip.core import guard, optim, state as stack
    from vecgossip import models
    from vecgossip.network import topology
    from vecgossip.config.checks import DEVICES
    from vecgossip.models.execution import EXECS
    from vecgossip.data.registry import REGISTRY
    join = lambda xs: ", ".join(str(x) for x in xs)  # noqa: E731
    return {
        "model.name": join(models.MODELS) + " (+ register_model)", "model.impl": join(models.IMPLS),
        "model.exec": join(EXECS),
        "model.init": join(stack.INIT_SCHEMES), "model.norm": "null, " + join(models.NORMS),
        "data.name": join(REGISTRY) + " (+ register_dataset)", "data.eval_set": join(dataset.EVAL_SETS),
        "data.sampler": join(sampling.SAMPLERS), "data.partition": "null, " + join(partition.PARTITIONS),
        "topology.name": join(topology.TOPOLOGIES) + " (+ register_topology)",
        "optim.lr_policy": join(optim.LR_POLICIES), "engine.on_divergence": join(guard.POLICIES),
        "on_divergence": join(guard.POLICIES), "engine.malloc": join(allocator.MODES),
        "distributed.backend": join(shard.BACKENDS), "distributed.exchange": join(shard.EXCHANGES),
        "distributed.enabled": "auto, true, false", "device": join(DEVICES), "precision": join(models.PRECISIONS),
        "logger": "null, tensorboard" if None in tracking.LOGGERS else join(tracking.LOGGERS),
        "resume": "auto, true, false, a checkpoint path", "t_acq": "an int, or [lo, hi]",
        "engine.t_acq": "an int, or [lo, hi]", "partition": "null, " + join(partition.PARTITIONS),
    }


def comments(path: Path) -> dict[str, str]:
    """``dotted key -> comment`` of a YAML file: the ``# ...`` beside each ``key: value`` line, with
    the comment-only lines just below that continue it (their ``#`` in the same column), keys
    nested by indent."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    last = None
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") and last is not None and abs(line.index("#") - last[1]) <= 3:
            out[last[0]] = (out.get(last[0], "") + " " + line.strip().lstrip("#").strip()).strip()
            continue
        m = re.match(r"^(\s*)([A-Za-z_][\w]*)\s*:(.*)$", line)
        if not m or line.lstrip().startswith("#") or line.lstrip().startswith("- "):
            last = None
            continue
        indent, key, rest = len(m.group(1)), m.group(2), m.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        dotted = ".".join([k for _, k in stack] + [key])
        stack.append((indent, key))
        comment = rest.split("#", 1)[1].strip() if "#" in rest and not rest.strip().startswith(("'", '"')) else ""
        if comment:
            out[dotted] = comment
        last = (dotted, len(line) - len(rest) + rest.index("#")) if comment else None
    return out


def type_name(t) -> str:
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is typing.Union and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        return f"{type_name(inner[0])} or null"
    if origin in (list, tuple):
        return f"list of {type_name(args[0])}" if args else "list"
    if t is typing.Any:
        return "see values"
    return getattr(t, "__name__", str(t))


def fields(cls, prefix: str = "") -> list[tuple[str, typing.Any]]:
    """(dotted name, type) of a schema dataclass, nested groups flattened."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        if dataclasses.is_dataclass(t):
            out += fields(t, f"{prefix}{f.name}.")
        else:
            out.append((prefix + f.name, t))
    return out


def raw_defaults(method: str) -> dict:
    """The composed default config of the engine ``method`` selects, interpolations unresolved."""
    from omegaconf import OmegaConf

    from hydra import compose, initialize_config_dir
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"method={method}"])
    return OmegaConf.to_container(cfg, resolve=False)


def lookup(d: dict, key: str):
    for part in key.split("."):
        if not isinstance(d, dict) or part not in d:
            return "-"
        d = d[part]
    return d


def fmt(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return f"`{v}`" if v != "-" else "-"


def row(key: str, t, default, helps: list[dict], choices: dict) -> str:
    text = next((h[key] for h in helps if key in h), "")
    cell = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    return (f"| `{key}` | {cell(type_name(t))} | {cell(fmt(default))} | {cell(choices.get(key, ''))} | "
            f"{cell(text)} |")


def group_choices() -> list[str]:
    out = ["| group | options (files in `vecgossip/conf/<group>/`) |", "|---|---|"]
    for g in GROUPS:
        names = sorted(p.stem for p in (CONF / g).glob("*.yaml"))
        out.append(f"| `{g}` | {', '.join(f'`{n}`' for n in names)} |")
    return out


def group_comments(group: str) -> dict[str, str]:
    """Comments of every file of ``group``, keyed with the group's prefix (the first file that
    explains a key wins, so the default file of the group is read first)."""
    out: dict[str, str] = {}
    for p in sorted((CONF / group).glob("*.yaml")):
        for k, v in comments(p).items():
            key = k if k.startswith(group + ".") or "@package _global_" in p.read_text()[:200] else f"{group}.{k}"
            out.setdefault(key, v)
    return out


def source_comments(cls) -> dict[str, str]:
    """``field -> comment`` of a dataclass, from the ``name: type = default  # comment`` lines of
    its source."""
    import inspect
    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^\s+(\w+)\s*:[^#\n]*#(.*)$", src, re.M)}


def algorithms() -> list[str]:
    """One section per algorithm config (conf/algorithm/*.yaml): its class, its Params."""
    from vecgossip.algorithms import import_target
    out = []
    for p in sorted((CONF / "algorithm").glob("*.yaml")):
        text = p.read_text()
        target = re.search(r"_target_:\s*(\S+)", text).group(1)
        cls = import_target(target, "algorithm._target_")
        head = [ln.lstrip("# ").rstrip() for ln in text.splitlines() if ln.startswith("#")]
        out += [f"### `algorithm={p.stem}`", "", f"`{target}` ({cls.engine} engine). " + " ".join(head), ""]
        params = [f for f in dataclasses.fields(cls.Params)]
        if not params:
            out += ["No hyperparameters of its own.", ""]
            continue
        helps = {**source_comments(cls.Params), **comments(p)}
        hints = typing.get_type_hints(cls.Params)
        out += ["| option | type | default | description |", "|---|---|---|---|"]
        for f in params:
            out.append(f"| `algorithm.{f.name}` | {type_name(hints[f.name])} | {fmt(f.default)} | "
                       f"{helps.get(f.name, '').replace('|', '/')} |")
        out.append("")
    return out


def reference() -> str:
    from vecgossip.config import schema
    choices = allowed()
    top = comments(CONF / "config.yaml")
    tick, rounds = raw_defaults("gossip"), raw_defaults("dfedavg")
    helps_by_group = {g: group_comments(g) for g in ("model", "data", "topology", "optim", "engine", "averaging")}
    rounds_engine = comments(CONF / "engine" / "rounds.yaml")
    out = ["# Configuration reference", "",
           "Generated from the config schemas (`vecgossip/config/schema.py`, each algorithm's `Params`), the shipped "
           "YAML (defaults and the comments beside them) and the checks' lists of allowed values "
           "(`python -m vecgossip.config.reference`). An unknown key or a value of the wrong type stops a run "
           "with one line (exit code 2), wherever it came from: the command line, a preset, a plug-in's YAML.",
           "", "## Config groups", "", *group_choices(), ""]
    sections = {"Run control and short knobs (`config.yaml`)": [], "model": [], "data": [], "topology": [],
                "averaging": [], "faults": [], "distributed": []}
    for key, t in fields(schema.Root):
        g = key.split(".", 1)[0] if "." in key else None
        title = g if g in sections else "Run control and short knobs (`config.yaml`)"
        helps = [top] + ([helps_by_group[g]] if g in helps_by_group else []) + [rounds_engine]
        default = lookup(tick, key)
        if default == "-":                    # set by the round engine's defaults (engine/rounds.yaml)
            default = lookup(rounds, key)
        sections[title].append(row(key, t, default, helps, choices))
    head = ["| option | type | default | allowed | description |", "|---|---|---|---|---|"]
    for title, rows in sections.items():
        out += [f"## {title}" if title.startswith("Run") else f"## `{title}`", "", *head, *rows, ""]
    for name, cfg, extra in (("tick", tick, []), ("rounds", rounds, [rounds_engine])):
        for group in ("engine", "optim"):
            schema_cls = schema.ENGINE[name] if group == "engine" else schema.OPTIM[name]
            out += [f"## `{group}` ({name} engine: `engine={name}`)", "", *head]
            for key, t in fields(schema_cls, group + "."):
                out.append(row(key, t, lookup(cfg, key), [*extra, helps_by_group[group], top], choices))
            out.append("")
    out += ["## `algorithm`: the method's algorithm and its hyperparameters", "",
            "A method preset (`method=NAME`, `vecgossip/conf/method/`) selects one of these and the engine "
            "it runs on; a user's own algorithm is `algorithm._target_=mypkg.MyAlgorithm` plus its `Params`.", "",
            *algorithms()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference())
