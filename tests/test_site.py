"""The documentation site as a reader gets it: ``mkdocs build --strict`` into a temporary folder,
then the rendered HTML checked (issue 39): no docstring role left raw (``:class:`...```), the math
marked for MathJax, every line of the worked examples there and their zips beside them, option
names kept whole in the configuration reference, the search index built."""
from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import zipfile

import pytest

from test_config import REPO

pytest.importorskip("mkdocs", reason="the docs tools come with the test extra: pip install -e '.[test]'")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def text(path) -> str:
    """A page's visible text: tags dropped, entities decoded (code highlighting splits lines into spans)."""
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


def test_no_raw_roles_on_any_page(site):
    pages = list(site.rglob("*.html"))
    assert len(pages) > 15
    raw = [(p.relative_to(site).as_posix(), m.group(0)) for p in pages
           for m in re.finditer(r":(?:class|func|meth|mod|attr|exc|obj|data):`?", text(p))]
    assert not raw, raw[:5]


def test_math_is_marked_for_mathjax(site):
    page = (site / "privacy" / "index.html").read_text()
    assert page.count('class="arithmatex"') >= 3 and "javascripts/mathjax.js" in page


def test_the_worked_examples_are_whole_and_downloadable(site):
    page = text(site / "write-your-own" / "index.html")
    source = (REPO / "examples" / "dfedprox" / "dfedprox_plugin" / "algorithm.py").read_text()
    for line in source.splitlines():
        assert line.strip() in page, line                                   # every line, the key one included
    assert "g = g[:, :p] + mu * (w - anchor[chunk_rows]) + opt.weight_decay * w" in page
    for name in ("dfedprox", "trust_gossip"):
        names = zipfile.ZipFile(site / "examples" / f"{name}.zip").namelist()
        assert f"{name}/{name}_plugin/algorithm.py" in names


def test_configuration_option_names_are_not_broken(site):
    page = (site / "configuration" / "index.html").read_text()
    css = (site / "stylesheets" / "extra.css").read_text()
    assert "stylesheets/extra.css" in page and "white-space: nowrap" in css and "td:first-child code" in css
    assert "<code>method_name</code>" in page


def test_search_index_is_built(site):
    index = (site / "search" / "search_index.json").read_text()
    assert '"location":"write-your-own/' in index.replace(" ", "")
