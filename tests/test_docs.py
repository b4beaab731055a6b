"""Issue 26: the README is a front page whose every number links to its evidence; the
configuration reference is generated from the schemas and covers every option; every public name
has a docstring; one version everywhere. (``mkdocs build --strict``, which renders every page and
docstring and fails on a broken link, runs in .ci/run.)"""
from __future__ import annotations

import dataclasses
import inspect
import os
import re
import sys
import tomllib

import pytest

import vecgossip
from test_config import REPO


def readme() -> str:
    return (REPO / "README.md").read_text()


def test_readme_is_a_front_page():
    text = readme()
    assert len(text.splitlines()) <= 200
    assert "pip install -e . && python -m vecgossip" in text and "pip install -e '.[test]' && python -m pytest -q" in text
    assert "mkdocs serve" in text


def links(text: str) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not t.startswith(("http://", "https://", "#"))]


def test_every_readme_link_is_a_file_of_the_repository():
    found = links(readme())
    assert len(found) >= 10
    missing = [t for t in found if not (REPO / t.split("#")[0]).is_file()]
    assert not missing, missing


def headline_rows() -> list[tuple[str, str]]:
    """(ours, evidence link) of every row of the README's headline table."""
    section = readme().split("## Headline numbers", 1)[1].split("\n## ", 1)[0]
    rows, last = [], None
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("claim", "---") and not set(cells[0]) <= {"-"}:
            last = links(cells[3])[0] if links(cells[3]) else last        # "same": the row above's
            rows.append((cells[1], last))
    return rows


def test_every_headline_number_is_in_its_evidence():
    """Each number of the 'ours' column appears in the linked file or the folder it documents."""
    rows = headline_rows()
    assert len(rows) >= 8
    for ours, link in rows:
        target = REPO / link
        folder = target.parent
        corpus = "".join(p.read_text(errors="ignore") for p in sorted(folder.rglob("*"))
                         if p.is_file() and p.suffix in (".md", ".csv", ".txt", ".json"))
        for number in re.findall(r"\d+\.\d+|\d{3,}", ours):
            assert number in corpus, f"{number} ({ours}) is not in {folder}"


def test_configuration_reference_covers_every_option():
    from vecgossip.config import schema
    from vecgossip.config.reference import fields, reference
    text = reference()
    parts = [(schema.RunBase, "")] + [(root.model_fields[g].annotation, f"{g}.")
                                      for root in schema.ENGINES.values() for g in ("engine", "optim")]
    for cls, prefix in parts:
        for key, _ in fields(cls, prefix):
            assert key == "algorithm" or f"| `{key}` |" in text, key
    from vecgossip.core.imports import import_target
    for path in sorted((REPO / "vecgossip" / "conf" / "algorithm").glob("*.yaml")):
        target = re.search(r"_target_:\s*(\S+)", path.read_text()).group(1)
        assert f"### `algorithm={path.stem}`\n\n`{target}`" in text
        for f in dataclasses.fields(import_target(target, "t").Params):
            assert f"| `algorithm.{f.name}` |" in text, (path.stem, f.name)


def public_objects():
    import vecgossip.algorithms as algorithms
    import vecgossip.algorithms.compressors as compressors
    for module, names in ((vecgossip, vecgossip.__all__), (algorithms, algorithms.__all__), (compressors, ["Compressor"])):
        for name in names:
            if not name.startswith("__"):
                yield f"{module.__name__}.{name}", getattr(module, name)


@pytest.mark.parametrize("name, obj", list(public_objects()), ids=lambda v: v if isinstance(v, str) else "")
def test_every_public_name_has_a_docstring(name, obj):
    assert inspect.getdoc(obj), name
    if inspect.isclass(obj):
        for attr, member in vars(obj).items():
            if attr.startswith("_") or not callable(member) or isinstance(member, type):
                continue
            assert inspect.getdoc(member), f"{name}.{attr}"


def test_one_version_everywhere():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["project"]["dynamic"] == ["version"]          # read from vecgossip/_version.py
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"]["attr"] == "vecgossip._version.__version__"
    project = vecgossip.__version__
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert released and released[0] == project


def test_sphinx_roles_render_as_code():
    """The docs hook turns the docstrings' roles, which mkdocstrings leaves as text, into code."""
    sys.path.insert(0, str(REPO / "docs"))
    import hooks
    html = 'see :class:<code>~vecgossip.adversaries.Attack</code> and :func:`vecgossip.run` or :meth:<code>check</code>'
    assert hooks.plain_roles(html) == "see <code>Attack</code> and <code>vecgossip.run</code> or <code>check</code>"


def test_worked_examples_are_shown_whole_and_downloadable(tmp_path):
    """Write-your-own shows every line of each example (pymdownx.snippets of the files the tests
    run, not an abridged copy with the key line elided) and links a zip of it that a pip user, who
    has no examples/ folder, can unzip and import."""
    import subprocess
    import zipfile
    page = (REPO / "docs" / "write-your-own.md").read_text()
    assert "abridged" not in page and "# g + mu (w - a_i)" not in page
    included = re.findall(r'^--8<-- "([^"]+)"$', page, re.M)
    assert "examples/dfedprox/dfedprox_plugin/algorithm.py" in included
    assert "examples/trust_gossip/trust_gossip_plugin/algorithm.py" in included
    assert all((REPO / path).is_file() for path in included)
    sys.path.insert(0, str(REPO / "docs"))
    import hooks
    for name, package in (("dfedprox", "dfedprox_plugin"), ("trust_gossip", "trust_gossip_plugin")):
        assert f"(examples/{name}.zip)" in page
        path = tmp_path / f"{name}.zip"
        path.write_bytes(hooks.example_zip(REPO / "examples" / name))
        zipfile.ZipFile(path).extractall(tmp_path)
        assert (tmp_path / name / package / "conf" / "method" / f"{name}.yaml").is_file()
        out = subprocess.run([sys.executable, "-c", f"import {package}.algorithm as a; print(a.__file__)"],
                             cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path / name)},
                             capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.startswith(str(tmp_path)), out.stderr


def test_every_dotted_import_path_in_the_docs_imports():
    """Each `vecgossip.x.y...` the docs or the README name is a module or an attribute reached from
    one (issue 49: reliability.md named vecgossip.core.state.load_models, which is not there)."""
    import importlib
    import re
    import warnings
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    files = sorted((root / "docs").glob("*.md")) + [root / "README.md"]
    bad = []
    for f in files:
        for m in re.finditer(r"(?<![\w/.])(vecgossip(?:\.[A-Za-z_]\w*)+)", f.read_text()):
            parts = m.group(1).split(".")
            obj, rest = None, []
            for i in range(len(parts), 0, -1):
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", DeprecationWarning)
                        obj = importlib.import_module(".".join(parts[:i]))
                    rest = parts[i:]
                    break
                except ImportError:
                    continue
            for name in rest:
                obj = getattr(obj, name, None)
            if obj is None:
                bad.append(f"{f.name}: {m.group(1)}")
    assert not bad, bad
