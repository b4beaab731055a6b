"""vecgossip: gossip learning and decentralized FL with every node's model in one stacked tensor."""
import os

# Bitwise reproducibility across row positions: without Conditional Numerical Reproducibility,
# MKL's sgemm rounds differently with the output's address on some CPUs (measured on a 2-core AMD
# EPYC, MKL's AVX2 path: addmm_ into C at a float offset of 1-3 mod 4 differs in the last bits
# from offset 0, and mm of (10, 64) @ (64, 64) likewise). A node's rows sit at every offset of the
# (N, P) state, so its numbers would depend on its row: replicas (replica s in rows sN..) and
# shards (a rank's clients from row 0) would drift from a separate run. CNR mode AUTO keeps
# MKL's dispatch for the CPU and removes that dependence (benchmarks/reproducible.py: sgemm 118 vs
# 127 GFLOP/s with and without, within this VM's noise). MKL reads the variable at its first call,
# so it is set when vecgossip is imported; a user's own setting wins.
os.environ.setdefault("MKL_CBWR", "AUTO")

from vecgossip._version import __version__  # noqa: E402
from vecgossip import _compat  # noqa: E402

_compat.install()   # 0.2.0's import paths (vecgossip.core.state, vecgossip.composition.root, ...) for one release

from vecgossip.api import Result, compose, run  # noqa: E402  (after MKL_CBWR: MKL reads it at its first call)
from vecgossip.core.errors import ConfigError, DivergedRun  # noqa: E402
from vecgossip.data.registry import register_dataset  # noqa: E402
from vecgossip.models import register_model  # noqa: E402
from vecgossip.network.topology import register_topology  # noqa: E402

__all__ = ["ConfigError", "DivergedRun", "Result", "compose", "register_dataset", "register_model", "register_topology", "run",
           "__version__"]
