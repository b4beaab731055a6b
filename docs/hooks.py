"""MkDocs hooks: pages and files generated at build time, so that nothing on the site is a
hand-kept copy that can drift.

* ``configuration.md``: the configuration reference, from the config schemas, the shipped YAML and
  the checks' lists of allowed values (:mod:`vecgossip.config.reference`);
* ``results/...``: the committed evidence the pages cite (every ``results/*/`` folder's tables,
  figures and READMEs, not the per-run files) and ``benchmarks/RESULTS.md``, so that a number on the
  site links to the file it came from;
* ``examples/<name>.zip``: each plug-in example's package folder (``examples/<name>/``), for a
  reader who installed the wheel and has no ``examples/`` folder (:func:`example_zip`);
* the docstrings' Sphinx roles (``:class:`~a.b.C```), which mkdocstrings leaves as text, rendered
  as code (``C``; the full path without ``~``) on every page (:func:`plain_roles`).
"""
from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

from mkdocs.structure.files import File, InclusionLevel

EVIDENCE = (".md", ".csv", ".png", ".txt")


def on_files(files, config):
    from vecgossip.config.reference import reference
    root = Path(config.config_file_path).parent
    files.append(File.generated(config, "configuration.md", content=reference()))
    for path in sorted((root / "results").glob("*/*")):
        if path.is_file() and path.suffix in EVIDENCE:
            files.append(_evidence(config, path, root))
    files.append(_evidence(config, root / "benchmarks" / "RESULTS.md", root))
    for example in sorted(p for p in (root / "examples").iterdir() if p.is_dir()):
        files.append(File.generated(config, f"examples/{example.name}.zip", content=example_zip(example),
                                    inclusion=InclusionLevel.NOT_IN_NAV))
    return files


def example_zip(folder: Path) -> bytes:
    """The example's folder as a zip (its source and YAML files, no caches), unzipped as
    ``<name>/...``: put ``<name>`` on ``PYTHONPATH`` as the page says."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.suffix in (".py", ".yaml", ".md") and "__pycache__" not in path.parts:
                info = zipfile.ZipInfo(path.relative_to(folder.parent).as_posix(), date_time=(2026, 1, 1, 0, 0, 0))
                z.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def _evidence(config, path: Path, root: Path) -> File:
    rel = path.relative_to(root).as_posix()
    return File.generated(config, rel, abs_src_path=str(path), inclusion=InclusionLevel.NOT_IN_NAV)


ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj|ref):(?:<code>(~?)([^<]*)</code>|`(~?)([^`]*)`)")


def plain_roles(html: str) -> str:
    """``:class:<code>~a.b.C</code>`` (a role mkdocstrings did not resolve) as ``<code>C</code>``."""
    def code(m: re.Match) -> str:
        tilde, target = (m.group(1), m.group(2)) if m.group(2) is not None else (m.group(3), m.group(4))
        return f"<code>{target.rsplit('.', 1)[-1] if tilde else target}</code>"
    return ROLE.sub(code, html)


def on_page_content(html, page, config, files):
    return plain_roles(html)
