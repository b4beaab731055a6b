"""``python -m vecgossip --help``: the project's own page (issue 58, item 5). What a run is, the two
engines, each config group with its choices (read from the shipped configs, so the page cannot
fall behind them), how to sweep, where the docs are. Hydra's own page stays at ``--hydra-help``
and the composed config at ``--cfg job``."""
from __future__ import annotations

import textwrap
from pathlib import Path

CONF = Path(__file__).resolve().parents[1] / "conf"

GROUPS = {   # group -> what choosing it does (one line each)
    "method": "the algorithm preset: its class, its engine and the paper's settings",
    "model": "the network every node trains",
    "data": "the data set and how it is split over nodes",
    "topology": "the communication graph (round engine; the tick engine draws a regular graph of `degree`)",
    "engine": "set by the method: tick (paper 1) or rounds (paper 2)",
    "optim": "the local optimiser (lr, momentum, weight decay, SAM)",
    "averaging": "Eq. 1's merge knobs on the tick engine (beta, R, correction, compression)",
    "experiment": "a paper's experiment as a preset: +experiment=NAME",
}


def choices(group: str) -> list[str]:
    """The shipped choices of a config group (its YAML files), private ones (``_name``) left out."""
    return sorted(p.stem for p in (CONF / group).glob("*.yaml") if not p.stem.startswith("_"))


def text() -> str:
    """The page, as printed."""
    lines = [
        "vecgossip: gossip learning and decentralized federated learning with every node's model stacked",
        "into one batched tensor.",
        "",
        "usage: python -m vecgossip [+experiment=NAME] [method=NAME] [option=value ...] [-m]",
        "",
        "A run trains N nodes on one data set and writes metrics.csv, summary.json, plots and a report",
        "into its folder (outputs/DATE/TIME, or hydra.run.dir=PATH). With no option it runs the default",
        "job: plain gossip learning beside variance-corrected averaging on 50 nodes (paper 1's point).",
        "",
        "Two engines, chosen by the method:",
        "  tick    paper 1's asynchronous clock: a node trains every t_acq ticks, sends its model to its",
        "          degree peers, merges full buffers by Eq. 1 (+ variance correction). max_ticks, nodes, degree.",
        "  rounds  paper 2's synchronous rounds: local SGD/SAM steps, then gossip over the topology (or a",
        "          server). rounds, clients, local_steps, engine.gossip_steps.",
        "  clock.enabled=true times either in virtual seconds (compute, links, churn).",
        "",
        "Config groups (option=choice):",
    ]
    for group, what in GROUPS.items():
        names = choices(group)
        lines.append(f"  {group:<11}{what}")
        if names and group != "engine":
            lines += textwrap.wrap(", ".join(names), 100, initial_indent=" " * 13, subsequent_indent=" " * 13)
    lines += [
        "",
        "Common options: seed, nodes / clients, degree, rounds, max_ticks, eval_every, lr, replicas,",
        "device (cpu | cuda), data_root (else $VECGOSSIP_DATA), resume (auto | false), progress.",
        "Every option of a group: group.option=value (optim.lr=0.05, clock.links.uplink=10). A misspelled",
        "option or choice stops the run with one line naming what is allowed (exit code 2).",
        "",
        "Sweeps: -m with comma lists runs every combination, one folder per job; then",
        "  python -m vecgossip +experiment=table1 -m             # Table I's 64 runs",
        "  python -m vecgossip method=dpsgd,dfedsam seed=0,1,2 -m",
        "  python -m vecgossip.report multirun/DATE/TIME         # their table and plots",
        "",
        "More: the docs (mkdocs serve; docs/ in the repository): Quickstart, Configuration reference (every",
        "option with its default and meaning), Write your own algorithm, Python API (vecgossip.run).",
        "Hydra's own help: --hydra-help; the composed config of a command: --cfg job.",
    ]
    return "\n".join(lines)
