"""Copy the small files of every finished job under a sweep root into results/ (summary.json,
metrics.csv, .hydra/overrides.yaml; not checkpoints, .npy files or per-run plots): what each
results/*/make.sh keeps beside its report.

    python results/copy_runs.py SWEEP_ROOT DEST
"""
import shutil
import sys
from pathlib import Path

root, dest = Path(sys.argv[1]), Path(sys.argv[2])
for summary in sorted(root.rglob("summary.json")):
    job = summary.parent
    out = dest / job.relative_to(root)
    (out / ".hydra").mkdir(parents=True, exist_ok=True)
    for f in ("summary.json", "metrics.csv", ".hydra/overrides.yaml"):
        if (job / f).exists():
            shutil.copy(job / f, out / f)
print(f"{len(list(dest.rglob('summary.json')))} runs in {dest}")
