"""A virtual environment for install tests that sees the test interpreter's packages (issue 58,
item 12). No vecgossip import: a venv made from inside such a venv imports this too."""
from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path


def packages_of_this_interpreter(env_dir: Path) -> Path:
    """A fresh venv that sees the packages of the interpreter running the tests (torch & co, pip),
    whether that is a base interpreter or itself a venv (``system_site_packages`` would reach the
    base interpreter's, not an active venv's): a .pth file lists this interpreter's site dirs.
    Directories a .pth names are only put on sys.path (their own .pth files, e.g. an editable
    install of the checkout, are not run), so the wheel installed into the venv is what imports."""
    import site
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    dirs = [d for d in dict.fromkeys([*sys.path, *site.getsitepackages(), site.getusersitepackages()])
            if d.endswith(("site-packages", "dist-packages")) and Path(d).is_dir()]   # a venv's and what it sees
    (Path(purelib) / "the_test_interpreters_packages.pth").write_text("\n".join(dirs) + "\n")
    return py
