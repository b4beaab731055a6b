"""Entry point: ``python -m vecgossip [+experiment=NAME] [overrides] [-m]``."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig


DIVERGED: list[str] = []   # a sweep's jobs that diverged (on_divergence=stop): the sweep goes on, then exits 3


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from vecgossip.core.errors import ConfigError
    from vecgossip.composition.root import DivergedRun, Interrupted, run

    from hydra.types import RunMode

    from vecgossip.composition import demo
    from vecgossip.config import default_job
    from vecgossip.runtime import shard
    hc = HydraConfig.get()
    out = hc.runtime.output_dir
    overrides = list(hc.overrides.task)
    together = False             # every rank (under torchrun) ends here the same way: leave together
    code, summary = 0, None
    try:
        if default_job.wanted(cfg, overrides, hc.mode == RunMode.MULTIRUN):
            demo.run_demo(cfg, overrides, Path(out))
        else:
            summary = run(cfg, out)
        together = True
    except ConfigError as err:   # bad input: one line naming the option, no traceback, exit 2
        print(f"vecgossip: error: {err}", file=sys.stderr)   # (maybe on one rank only: no barrier then)
        code = 2
    except Interrupted as err:   # SIGINT/SIGTERM: checkpoint written; 130 as a shell reports Ctrl-C
        together, code = True, 130
        print(f"vecgossip: interrupted at {err.pos}; the state is in {err.path}; to continue: "
              f"{continue_command(hc, out)}", file=sys.stderr)
    except DivergedRun as err:   # on_divergence=stop
        together, code = True, 3
        print(f"vecgossip: {err}", file=sys.stderr)
    except BaseException:        # anything else: leave the process group, then the traceback
        shard.stop()
        raise
    if summary is not None:
        code = report(summary, hc, out)
    shard.stop(barrier=together, code=code)   # under torchrun: this worker ends here
    if code == 3 and hc.mode == RunMode.MULTIRUN:  # a diverged job is a result: the sweep's next jobs still run
        DIVERGED.append(out)
    elif code:
        sys.exit(code)


def report(summary: dict, hc, out: str) -> int:
    """The run's last line (rank 0 under torchrun); the exit code: 130 when Ctrl-C came while the
    outputs were written (they are complete; a sweep stops there), else 0."""
    from hydra.types import RunMode

    from vecgossip.composition.root import outcome
    if int(os.environ.get("RANK", 0)) == 0:
        if summary.get("_skipped"):
            print(f"[vecgossip] {out}: complete already (summary.json there), not run again; resume=false reruns it")
        else:
            print(f"[vecgossip] {outcome(summary)} wall={summary['wall_seconds']:.1f}s -> {out}")
    if not summary.get("_stop"):
        return 0
    if hc.mode == RunMode.MULTIRUN:
        print("vecgossip: the sweep stops here (its remaining jobs are not run); to continue it: "
              f"{continue_command(hc, out)}", file=sys.stderr)
    return 130


def continue_command(hc, out: str) -> str:
    """The command that continues this run where it stopped: the same command line in the same
    folder (hydra.run.dir, or a sweep's hydra.sweep.dir: its finished jobs are skipped), resume=auto."""
    from hydra.types import RunMode
    multirun = hc.mode == RunMode.MULTIRUN
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    folder = hc.sweep.dir if multirun else out
    args = [a for a in sys.argv[1:] if not a.startswith((key + "=", "resume="))]
    return " ".join(["python -m vecgossip", *map(quote, args), quote(f"{key}={folder}")])


def quote(arg: str) -> str:
    import shlex
    return shlex.quote(arg)


def precheck(argv: list[str]) -> None:
    """Bad input stops here, before Hydra makes a run directory: compose the config from the
    command line and validate it; any error is one line on stderr and exit code 2. A sweep (-m):
    every job of it, as Hydra's basic sweeper will expand it (the command line's lists and the
    preset's sweeper params), composed and validated before the first starts."""
    flags = [a for a in argv if a.startswith("-")]
    if any(f not in ("-m", "--multirun") for f in flags):
        return                                # --help, --cfg, ...: Hydra's own
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    overrides = [a for a in argv if not a.startswith(("hydra.", "hydra/", "+hydra", "~hydra", "-"))]
    search = [a for a in argv if a.startswith(("hydra.searchpath=", "+hydra.searchpath="))]   # a user's presets
    conf = str(Path(__file__).resolve().parent / "conf")

    def composed(over: list[str], hydra: bool = False):
        with initialize_config_dir(config_dir=conf, version_base="1.3"):
            return compose(config_name="config", overrides=[*search, *over], return_hydra_config=hydra)
    from vecgossip.config.load import composition_error
    from vecgossip.core.errors import ConfigError
    from vecgossip.composition.root import check_data, validate
    jobs = sweep_jobs(overrides, composed) if flags else [(overrides, "")]
    checked = False
    for over, which in jobs:
        def without(key: str, over=over):
            return composed([o for o in over if o.split("=", 1)[0].lstrip("+~") != key])
        try:
            cfg = composed(over)
        except (HydraException, OmegaConfBaseException, ValueError) as err:
            fail(which + composition_error(err, without))
        try:
            plan = validate(cfg, over)
            if not checked:
                check_data(plan.first.cfg)    # missing data (or a failed download) before any run dir
                checked = True
        except (ConfigError, ValueError) as err:   # every check raises these for bad input
            fail(which + str(err))
    if flags:
        return
    if cfg.get("resume") in (True, "true"):   # continuing needs the run's directory and its checkpoint
        run_dir = next((a.split("=", 1)[1] for a in argv if a.startswith("hydra.run.dir=")), None)
        if run_dir is None:
            fail("resume=true continues a run in its directory: give hydra.run.dir=<that directory> "
                 "(or resume=<checkpoint path>)")
        if not (Path(run_dir) / "checkpoint.pt").exists():
            fail(f"resume=true but there is no checkpoint.pt in {run_dir}")


def sweep_jobs(overrides: list[str], composed) -> list[tuple[list[str], str]]:
    """A sweep's jobs as Hydra's basic sweeper makes them: the product of the command line's lists
    (``method=dpsgd,dfedsam``) and of the preset's ``hydra.sweeper.params`` for the keys the command
    line leaves alone; each job's overrides and the words that name it in an error."""
    import itertools

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    parser = OverridesParser.create()
    try:
        parsed = parser.parse_overrides(overrides)
    except HydraException as err:
        fail(str(err).splitlines()[0])
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    swept = [(o.get_key_element(), list(o.sweep_string_iterator())) for o in parsed if o.is_sweep_override()]
    try:
        preset = composed(fixed, hydra=True).hydra.sweeper.get("params") or {}
    except (HydraException, OmegaConfBaseException, ValueError):
        preset = {}                           # the jobs' own composition says what is wrong
    given = {o.key_or_group for o in parsed}
    for key, values in preset.items():
        if key.lstrip("+~") not in given:
            o = parser.parse_overrides([f"{key}={values}"])[0]
            swept.append((o.get_key_element(), list(o.sweep_string_iterator()) if o.is_sweep_override()
                          else [o.get_value_element_as_str()]))
    combos = list(itertools.product(*[[f"{k}={v}" for v in vals] for k, vals in swept])) or [()]
    return [(fixed + list(c), f"job {i} of {len(combos)} of the sweep ({' '.join(c) or 'no list'}): ")
            for i, c in enumerate(combos)]


def fail(message: str) -> None:
    print(f"vecgossip: error: {message}", file=sys.stderr)
    sys.exit(2)


def flags_first(argv: list[str]) -> list[str]:
    """Hydra's argparse rejects overrides on both sides of -m (`+experiment=vc -m alpha=null,0.5`);
    moving the value-less -m/--multirun flag to the front makes that documented form work."""
    flags = [a for a in argv if a in ("-m", "--multirun")]
    return flags + [a for a in argv if a not in ("-m", "--multirun")]


def quiet_rank(argv: list[str]) -> list[str]:
    """Under torchrun, ranks other than 0 write nothing of Hydra's own (no .hydra/, no log file):
    rank 0's run directory holds the run (shard.py)."""
    if int(os.environ.get("RANK", 0)) == 0:
        return argv
    return argv + ["hydra.output_subdir=null", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]


if __name__ == "__main__":
    if {"--help", "-h"} & set(sys.argv[1:]):          # the project's own page (Hydra's: --hydra-help)
        from vecgossip.config.help import text
        print(text())
        sys.exit(0)
    sys.argv[1:] = quiet_rank(flags_first(sys.argv[1:]))
    precheck(sys.argv[1:])
    main()
    if DIVERGED:
        print(f"vecgossip: {len(DIVERGED)} job(s) of the sweep diverged (outputs written): {', '.join(DIVERGED)}",
              file=sys.stderr)
        sys.exit(3)
