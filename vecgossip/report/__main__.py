"""``python -m vecgossip.report RUNS... [--out DIR]``."""
import sys

from vecgossip.report.tick import main

sys.exit(main())
