"""Published numbers of paper 1 (Tian et al., arXiv 2404.04616), used by the report for comparison."""
from __future__ import annotations

# Table I: ticks until "most reaching 90%". Key: (t_acq, R, N, k); t_acq "1-19" = uniform in 1..19.
# Values: (TL+compression IID, TL+compression alpha=0.5, VC IID, VC alpha=0.5).
TABLE1: dict[tuple[str, int, int, int], tuple[int, int, int, int]] = {
    ("10", 1, 50, 8): (1690, 3580, 550, 1200),
    ("10", 1, 50, 32): (1750, 3640, 460, 1390),
    ("10", 1, 1000, 8): (2810, 5820, 640, 1400),
    ("10", 1, 1000, 32): (2710, 5490, 560, 1350),
    ("10", 4, 50, 8): (2850, 6900, 790, 1350),
    ("10", 4, 50, 32): (3180, 7070, 750, 1830),
    ("10", 4, 1000, 8): (4470, 9470, 1030, 1630),
    ("10", 4, 1000, 32): (4360, 8780, 910, 1710),
    ("1-19", 1, 50, 8): (1710, 3730, 640, 1290),
    ("1-19", 1, 50, 32): (2110, 3760, 500, 1520),
    ("1-19", 1, 1000, 8): (2770, 5950, 640, 1730),
    ("1-19", 1, 1000, 32): (2600, 5860, 630, 1910),
    ("1-19", 4, 50, 8): (2930, 7780, 800, 2240),
    ("1-19", 4, 50, 32): (2770, 5480, 800, 1900),
    ("1-19", 4, 1000, 8): (4470, 9060, 1130, 3100),
    ("1-19", 4, 1000, 32): (4100, 8640, 930, 2730),
}
TABLE1_COLUMNS = (("tl_compression", "iid"), ("tl_compression", "alpha=0.5"), ("vc", "iid"), ("vc", "alpha=0.5"))


def paper_table1(t_acq: str, R: int, n: int, k: int, method: str, data: str) -> int | None:
    row = TABLE1.get((t_acq, R, n, k))
    if row is None or (method, data) not in TABLE1_COLUMNS:
        return None
    return row[TABLE1_COLUMNS.index((method, data))]


# Paper 2 (Shi et al., ICML 2023): CIFAR-10 test accuracy (%) by topology, 100 clients, 1000 rounds
# (docs: Paper 2). Key: (method, topology).
PAPER2_SCALE = "paper: 100 clients, CIFAR-10, Dirichlet 0.3, 5 local epochs x batch 128, 1000 rounds"
PAPER2_TOPOLOGY: dict[tuple[str, str], float] = {
    (m, t): v
    for m, row in {
        "dpsgd": (68.96, 74.36, 74.90, 75.35),
        "dfedavg": (69.95, 80.17, 83.13, 83.48),
        "dfedavgm": (72.55, 85.24, 86.94, 87.50),
        "dfedsam": (73.19, 85.28, 87.44, 88.05),
        "dfedsam_mgs": (80.55, 87.39, 88.06, 88.20),
    }.items()
    for t, v in zip(("ring", "grid", "exponential", "complete"), row)
}
