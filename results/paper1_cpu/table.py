"""Table I with N = 50 and N = 1000 in one table (issue 25): this folder's runs (N = 50,
runs.csv, made by make.sh) and results/paper1_n1000_cpu/runs.csv (N = 1000, its make.sh), through
the report's own table code. Writes table1.md / table1.csv here.

    python results/paper1_cpu/table.py
"""
from pathlib import Path

import pandas as pd

from vecgossip.core.files import write_csv
from vecgossip.report.tick import table1, table1_markdown

HERE = Path(__file__).resolve().parent
runs = pd.concat([pd.read_csv(HERE / "runs.csv"), pd.read_csv(HERE.parent / "paper1_n1000_cpu" / "runs.csv")],
                 ignore_index=True)
runs["options"] = runs["options"].astype(object).fillna("") if "options" in runs else ""
runs["k"] = runs["k"].astype("Int64")
runs["t_acq"] = runs["t_acq"].astype(str)
t1 = table1(runs)
write_csv(t1, HERE / "table1.csv")
(HERE / "table1.md").write_text(table1_markdown(t1))
print((HERE / "table1.md").read_text())
