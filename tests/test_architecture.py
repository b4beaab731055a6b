"""The package's shape (issue 36): one concept per sub-package, imports only downward, no cycle, and
no engine that names an algorithm. The graph is built from the source (every ``import`` and
``from ... import`` of every module, at any depth of the file, relative ones resolved), so a
function-level import counts as much as a top-level one.

The layers, lowest first; a module may import its own sub-package and any lower layer only:

    core < models, data, network, privacy < algorithms, adversaries < runtime < engines < config < report < composition < top level

(``vecgossip._version``, the version string, is a leaf every layer may read.)

(models, data, network and privacy share a layer and do not import each other.)"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "vecgossip"
LAYER = {"core": 0, "models": 1, "data": 1, "network": 1, "privacy": 1, "algorithms": 2, "adversaries": 2, "runtime": 3, "engines": 4, "config": 5,
         "report": 6, "composition": 7}
TOP = 8                 # api, __main__, __init__, _compat, _version
TOP_MODULES = {"vecgossip", "vecgossip.api", "vecgossip.__main__", "vecgossip._compat"}
LEAF = "vecgossip._version"   # the version string: no imports, read by every layer
ALGORITHM_INTERFACE = {"vecgossip.algorithms", "vecgossip.algorithms.base"}   # what an engine may import


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The vecgossip modules ``name`` imports (``from a import b``: a.b where that is a module)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("vecgossip")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("vecgossip"):
                continue
            subs = {f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in known}
            out |= subs if subs and len(subs) == len(node.names) else subs | {mod}
    return {m for m in out if m in known and m != name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {n: imports_of(n, p, set(mods)) for n, p in mods.items()}


def layer(name: str) -> tuple[int, str]:
    if name == LEAF:
        return -1, name
    if name in TOP_MODULES:
        return TOP, name
    sub = name.split(".")[1]
    assert sub in LAYER, f"{name}: a sub-package the layering does not know (add it to LAYER)"
    return LAYER[sub], sub


def test_the_package_top_holds_only_the_entry_points():
    top = sorted(p.name for p in PKG.glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "_compat.py", "_version.py", "api.py"], top


def test_no_upward_or_sideways_import():
    bad = []
    for mod, deps in graph().items():
        lm, pm = layer(mod)
        for d in deps:
            ld, pd = layer(d)
            if pd != pm and ld >= lm and not (lm == TOP and ld == TOP):
                bad.append(f"{mod} -> {d}")
    assert not bad, "imports that go up or sideways:\n" + "\n".join(sorted(bad))


def test_no_import_cycle():
    g = graph()
    colour, stack, cycles = defaultdict(int), [], []

    def visit(n):
        colour[n] = 1
        stack.append(n)
        for d in sorted(g[n]):
            if colour[d] == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif colour[d] == 0:
                visit(d)
        stack.pop()
        colour[n] = 2

    for n in sorted(g):
        if colour[n] == 0:
            visit(n)
    # a package's __init__ re-exporting its own modules is not a cycle of concepts
    real = [c for c in cycles if not all(m == c[0].rsplit(".", 1)[0] or m.startswith(c[0] + ".")
                                         or c[0].startswith(m + ".") for m in c)]
    assert not real, "import cycles:\n" + "\n".join(" -> ".join(c) for c in real)


def test_no_engine_imports_an_algorithm_module():
    bad = [f"{m} -> {d}" for m, deps in graph().items() if m.startswith("vecgossip.engines")
           for d in deps if d.startswith("vecgossip.algorithms") and d not in ALGORITHM_INTERFACE]
    assert not bad, bad


@pytest.mark.parametrize("old, new, name", [
    ("vecgossip.compressors", "vecgossip.algorithms.compressors", "Compressor"),
    ("vecgossip.stack", "vecgossip.models.saved", "load_models"),
    ("vecgossip.sim", "vecgossip.composition.root", "run"),
    ("vecgossip.topology", "vecgossip.network.topology", "register_topology"),
])
def test_old_import_paths_work_for_one_release_with_a_warning(old, new, name):
    import importlib
    import sys
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to"):
        mod = importlib.import_module(old)
    assert getattr(mod, name) is getattr(importlib.import_module(new), name)


def docstrings():
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    yield f"{module_name(path)}:{getattr(node, 'name', '<module>')}", doc


def test_docstrings_cite_the_repository_not_a_machine():
    """A docstring cites the paper or a page of this repository (never a file outside it) and
    says why, not one machine's timings: those are in benchmarks/RESULTS.md."""
    import re
    timing = re.compile(r"\b\d+(\.\d+)?\s?(ms|us|µs|GFLOP/s|GB/s)\b|\b\d+(\.\d+)?x (faster|slower)\b")
    outside = [name for name, doc in docstrings() if "REFERENCE.md" in doc]
    timed = [f"{name}: {timing.search(doc).group(0)}" for name, doc in docstrings() if timing.search(doc)]
    assert not outside, outside
    assert not timed, timed
