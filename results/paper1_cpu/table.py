"""Table I with N = 50 and N = 1000 in one table (issues 25, 40): the N = 50 sweep of make_n50.sh
(all 32 cells, seeds 0-2, read from the committed runs/ through the report's own loader), the
other methods of make.sh (runs.csv: the gossip baseline and FedAvg; its early Table I runs are
superseded by the sweep's) and results/paper1_n1000_cpu/runs.csv (N = 1000), through the report's
own table code. Writes table1.md / table1.csv and n50_runs.csv here.

    python results/paper1_cpu/table.py
"""
from pathlib import Path

import pandas as pd

from vecgossip.core.files import write_csv
from vecgossip.report.tick import load_runs, table1, table1_markdown

HERE = Path(__file__).resolve().parent
n50 = load_runs(HERE / "runs")[0]
write_csv(n50, HERE / "n50_runs.csv")
early = pd.read_csv(HERE / "runs.csv")
runs = pd.concat([early[early.name != "table1"], n50, pd.read_csv(HERE.parent / "paper1_n1000_cpu" / "runs.csv")],
                 ignore_index=True)
runs["options"] = runs["options"].astype(object).fillna("") if "options" in runs else ""
runs["k"] = runs["k"].astype("Int64")
runs["t_acq"] = runs["t_acq"].astype(str)
t1 = table1(runs)
write_csv(t1, HERE / "table1.csv")
(HERE / "table1.md").write_text(table1_markdown(t1))
print((HERE / "table1.md").read_text())
