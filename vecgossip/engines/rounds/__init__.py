"""The round engine (paper 2, Shi et al. ICML 2023): synchronous decentralized FL rounds."""
from vecgossip.engines.rounds.engine import RoundConfig, RoundEngine, RoundHistory  # noqa: F401
