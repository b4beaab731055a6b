"""Run ``python -m vecgossip ARGS`` for many argument lists without paying the interpreter's start
(importing torch and Hydra, ~2-4 s) for each: this small interpreter imports the CLI once, then
forks one child per argument list, which runs the real ``vecgossip.__main__`` as
``python -m vecgossip`` would (``runpy``, its own argv, stdout and stderr to files, its exit code).
Each child is a fresh process: Hydra's global state and logging are never initialised in this
parent, so nothing carries from one child to the next.

Usage: ``python tests/cli_forks.py JOBS.json RESULTS.json`` where JOBS.json is a list of argument
lists; RESULTS.json gets, per job, its exit code, stdout, stderr, wall seconds and the child's own
peak resident set (bytes; a forked child's peak includes the pages it shares with this parent,
about the size of an interpreter that has imported torch)."""
from __future__ import annotations

import json
import os
import runpy
import sys
import tempfile
import time
import traceback

# as `python -m vecgossip` run from the repository's root imports the package there: so does this
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import hydra  # noqa: F401,E402  (what vecgossip/__main__.py and its precheck import, once here;
import vecgossip.config.load  # noqa: F401,E402  not __main__ itself, which runpy runs fresh in each child)
import vecgossip.composition.demo  # noqa: F401,E402
import vecgossip.runtime.shard  # noqa: F401,E402
import vecgossip.composition.root  # noqa: F401,E402

PARALLEL = 2


def child(args: list[str], out: str, err: str) -> None:
    """In the forked child: stdout/stderr to files, then run the CLI as ``python -m vecgossip``.
    Never returns: whatever happens, the child ends here (it must not go on in the parent's loop)."""
    code = 1
    try:
        for fd, path in ((1, out), (2, err)):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(f, fd)
            os.close(f)
        sys.argv = ["vecgossip", *args]
        code = 0
        try:
            runpy.run_module("vecgossip", run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, (int, type(None))):
                print(e.code, file=sys.stderr)
        except BaseException:   # what the interpreter would print for an uncaught exception
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def main() -> None:
    jobs = json.loads(open(sys.argv[1]).read())
    results: list[dict | None] = [None] * len(jobs)
    running: dict[int, tuple[int, float]] = {}
    todo = list(enumerate(jobs))
    with tempfile.TemporaryDirectory(prefix="cli-forks-") as tmp:
        while todo or running:
            while todo and len(running) < PARALLEL:
                i, args = todo.pop(0)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    child(args, os.path.join(tmp, f"{i}.out"), os.path.join(tmp, f"{i}.err"))
                running[pid] = (i, time.perf_counter())
            pid, status, usage = os.wait4(-1, 0)
            i, t0 = running.pop(pid)
            results[i] = {"args": jobs[i], "returncode": os.waitstatus_to_exitcode(status),
                          "stdout": open(os.path.join(tmp, f"{i}.out")).read(),
                          "stderr": open(os.path.join(tmp, f"{i}.err")).read(),
                          "seconds": time.perf_counter() - t0, "peak_bytes": usage.ru_maxrss * 1024}
    with open(sys.argv[2], "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
