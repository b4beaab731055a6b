"""MkDocs hooks: pages and files generated at build time, so that nothing on the site is a
hand-kept copy that can drift.

* ``configuration.md``: the configuration reference, from the config schemas, the shipped YAML and
  the checks' lists of allowed values (:mod:`vecgossip.config.reference`);
* ``results/...``: the committed evidence the pages cite (every ``results/*/`` folder's tables,
  figures and READMEs, not the per-run files) and ``benchmarks/RESULTS.md``, so that a number on the
  site links to the file it came from.
"""
from __future__ import annotations

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
    return files


def _evidence(config, path: Path, root: Path) -> File:
    rel = path.relative_to(root).as_posix()
    return File.generated(config, rel, abs_src_path=str(path), inclusion=InclusionLevel.NOT_IN_NAV)
