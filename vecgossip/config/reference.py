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


def type_name(f) -> str:
    """What a field takes, in words (core/options.describe), choices spelled out."""
    from vecgossip.core.options import describe
    if f.annotation is typing.Any:
        return "any (its readers' type)"
    return describe(f.annotation, f.metadata)


def allowed(f) -> str:
    """The values a choice field takes: a Literal's, or the registry one_of reads (now)."""
    from vecgossip.core.options import _literal_values
    lit = _literal_values(f)
    metas = [*f.metadata, *(m for a in typing.get_args(f.annotation) for m in typing.get_args(a)[1:]),
             *typing.get_args(f.annotation)[1:]]
    for m in metas:
        names = getattr(getattr(m, "func", None), "allowed", None)
        if names is not None:
            return ", ".join(map(str, names())) + " (+ your own, registered)"
    return lit


def fields(cls, prefix: str = "") -> list[tuple[str, typing.Any]]:
    """(dotted name, field) of an options model, nested models flattened."""
    from pydantic import BaseModel
    out = []
    for name, f in cls.model_fields.items():
        t = f.annotation
        if isinstance(t, type) and issubclass(t, BaseModel):
            out += fields(t, f"{prefix}{name}.")
        else:
            out.append((prefix + name, f))
    return out


def raw_defaults(method: str | None, resolve: bool = False) -> dict:
    """The composed default config of the engine ``method`` selects (None: the base config's),
    interpolations unresolved unless ``resolve``."""
    from omegaconf import OmegaConf

    from hydra import compose, initialize_config_dir
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[] if method is None else [f"method={method}"])
    return OmegaConf.to_container(cfg, resolve=resolve)


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


def row(key: str, f, default, helps: list[dict]) -> str:
    from vecgossip.config.knobs import shipped_readers
    text = next((h[key] for h in helps if key in h), "")
    cell = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    kind = type_name(f)
    if f.annotation is typing.Any:             # a knob: its readers declare its type
        readers = sorted({r for r, _ in shipped_readers().get(key, [])})
        kind = "read as " + ", ".join(f"`{r}`" for r in readers) if readers else kind
    return f"| `{key}` | {cell(kind)} | {cell(fmt(default))} | {cell(allowed(f))} | {cell(text)} |"


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
    from vecgossip.core.imports import import_target
    from vecgossip.core.options import describe
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
            out.append(f"| `algorithm.{f.name}` | {describe(hints[f.name], [])} | {fmt(f.default)} | "
                       f"{helps.get(f.name, '').replace('|', '/')} |")
        out.append("")
    return out


def model_comments(cls, prefix: str = "") -> dict[str, str]:
    """``dotted key -> comment`` of an options model and the models nested in it (the comment beside
    each field in its source: the declaration is the documentation)."""
    from pydantic import BaseModel
    out = {prefix + k: v for k, v in source_comments(cls).items()}
    for name, f in cls.model_fields.items():
        if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel):
            out.update(model_comments(f.annotation, f"{prefix}{name}."))
    return out


def reference() -> str:
    from vecgossip.config import schema
    top = comments(CONF / "config.yaml")
    tick, rounds = raw_defaults("gossip"), raw_defaults("dfedavg")
    helps = [model_comments(schema.TickRun), model_comments(schema.RoundRun), top,
             *(group_comments(g) for g in ("model", "data", "topology", "optim", "engine", "averaging")),
             comments(CONF / "engine" / "rounds.yaml")]
    out = ["# Configuration reference", "",
           "Generated from the options each part declares (`vecgossip/config/schema.py` puts them together; "
           "each algorithm's `Params`), the shipped YAML (defaults) and the comments beside both "
           "(`python -m vecgossip.config.reference`). An unknown key, a value of the wrong type or out of "
           "range stops a run with one line (exit code 2), wherever it came from: the command line, a "
           "preset, a plug-in's YAML.", "", "## Config groups", "", *group_choices(), ""]
    sections = {"Run control (`config.yaml`)": [], "Short knobs (`config.yaml`)": [], "model": [], "data": [],
                "topology": [], "averaging": [], "faults": [], "distributed": []}
    for key, f in fields(schema.RunBase):
        g = key.split(".", 1)[0] if "." in key else None
        if key == "algorithm":              # its own section below
            continue
        title = g if g in sections else ("Short knobs (`config.yaml`)" if key in schema.KNOBS
                                         else "Run control (`config.yaml`)")
        default = lookup(tick, key)
        if default == "-":                    # set by the round engine's defaults (engine/rounds.yaml)
            default = lookup(rounds, key)
        sections[title].append(row(key, f, default, helps))
    head = ["| option | type | default | allowed | description |", "|---|---|---|---|---|"]
    for title, rows in sections.items():
        out += [f"## {title}" if " " in title else f"## `{title}`", "", *head, *rows, ""]
    for name, cfg, root in (("tick", tick, schema.TickRun), ("rounds", rounds, schema.RoundRun)):
        for group in ("engine", "optim"):
            out += [f"## `{group}` ({name} engine: `engine={name}`)", "", *head]
            for key, f in fields(root.model_fields[group].annotation, group + "."):
                out.append(row(key, f, lookup(cfg, key), helps[1:] if name == "rounds" else helps))
            out.append("")
    out += ["## `algorithm`: the method's algorithm and its hyperparameters", "",
            "A method preset (`method=NAME`, `vecgossip/conf/method/`) selects one of these and the engine "
            "it runs on; a user's own algorithm is `algorithm._target_=mypkg.MyAlgorithm` plus its `Params`.", "",
            *algorithms()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference())
