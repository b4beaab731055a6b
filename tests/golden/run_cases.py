"""Run golden cases (tests/golden/cases.py) into OUT/<case>, e.g. under torchrun to compare a
sharded run with one process:  torchrun --nproc-per-node=2 tests/golden/run_cases.py OUT CASE..."""
import sys
from pathlib import Path

import cases
import vecgossip

if __name__ == "__main__":
    out = Path(sys.argv[1])
    cases.register()
    for name in sys.argv[2:]:
        vecgossip.run(vecgossip.compose(overrides=[*cases.CASES[name], *cases.COMMON]), run_dir=out / name)
    from vecgossip.runtime import shard
    shard.stop(barrier=True)
