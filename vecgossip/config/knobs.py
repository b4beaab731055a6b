"""The short knobs (``nodes``, ``degree``, ``beta``, ...): options no part reads itself, which the
groups read by interpolation (``topology.n: ${nodes}``). From the interpolations alone this module
says how a user set an option (to name it as typed in a message), whether a knob is read at all
in a config, and which options read it in the shipped configs."""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from vecgossip.config.schema import KNOBS, PASS_THROUGH_GROUPS

REF = re.compile(r"\$\{([\w.]+)\}")
CONF = Path(__file__).resolve().parents[1] / "conf"
ALSO_PASS_THROUGH = ("engine.tl.enabled",)   # the transfer-learning switch: what the algorithm's ``tl`` reads


def pass_through(key: str) -> bool:
    """An option that only passes a value on: a short knob, the averaging group, ``engine.tl.enabled``."""
    return key in KNOBS or key.split(".", 1)[0] in PASS_THROUGH_GROUPS or key in ALSO_PASS_THROUGH


def interpolations(cfg: DictConfig | dict) -> dict[str, str]:
    """``{key: the key it reads}`` for every option whose value is exactly ``${other}``."""
    out: dict[str, str] = {}

    def walk(node, prefix: str) -> None:
        for k, v in node.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            elif isinstance(v, str) and REF.fullmatch(v):
                out[f"{prefix}{k}"] = REF.fullmatch(v).group(1)
    tree = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg
    tree.pop("hydra", None)
    walk(tree, "")
    return out


def typed_names(cfg: DictConfig):
    """``typed(key)``: the option the user sets to give ``key`` its value: the end of its chain of
    interpolations (``algorithm.beta`` <- ``averaging.beta`` <- ``beta``), else ``key`` itself."""
    refs = interpolations(cfg)

    def typed(key: str) -> str:
        seen = {key}
        while key in refs and refs[key] not in seen:
            key = refs[key]
            seen.add(key)
        return key
    typed.refs = refs
    return typed


def annotate(message: str, typed) -> str:
    """Each full option name in ``message`` that the user set through a short knob, followed by
    that knob: ``topology.n must be ...`` -> ``topology.n (nodes) must be ...``. A quoted value
    (``'nodes'``: what the user typed) is left verbatim."""
    parts = re.split(r"('[^']*'|\"[^\"]*\")", message)        # odd parts: quoted values
    for key in sorted(typed.refs, key=len, reverse=True):
        knob = typed(key)
        if knob != key and "." not in knob:
            for k in range(0, len(parts), 2):
                parts[k] = re.sub(rf"(?<![\w.]){re.escape(key)}(?![\w.(]| \()", f"{key} ({knob})", parts[k])
    return "".join(parts)


def consumed(cfg: DictConfig) -> set[str]:
    """The pass-through options some part of ``cfg`` reads, following interpolations from the
    parts' own options (a knob read only by an unread knob is unread too)."""
    refs = interpolations(cfg)
    out = {ref for key, ref in refs.items() if not pass_through(key)}
    while True:
        more = {ref for key, ref in refs.items() if key in out and ref not in out}
        if not more:
            return out
        out |= more


@lru_cache(maxsize=1)
def shipped_readers() -> dict[str, list[tuple[str, str]]]:
    """``{option: [(reader, file)]}``: every option of the shipped group configs that reads it,
    directly or through other options, with the file it is set in (``engine/rounds.yaml``)."""
    direct: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(CONF.glob("*/*.yaml")):
        group = path.parent.name
        if group in ("experiment", "hydra", "method"):
            continue
        text = path.read_text()
        tree = yaml.safe_load(text) or {}
        prefix = "" if "@package _global_" in text else f"{group}."
        tree.pop("defaults", None)
        for key, ref in interpolations(tree).items():
            direct.setdefault(ref, []).append((prefix + key, f"{group}/{path.name}"))
    out = {}
    for key in direct:
        seen, todo = [], list(direct[key])
        while todo:
            reader = todo.pop(0)
            if reader not in seen:
                seen.append(reader)
                todo += direct.get(reader[0], [])
        out[key] = seen
    return out
