"""The round engine (paper 2, Shi et al. ICML 2023): :mod:`.engine` (the engine and the services
an algorithm gets), :mod:`.local` (step 1: local iterations batched over clients and replicas),
:mod:`.communication` (step 2 over a graph), :mod:`.server` (step 2 with a server),
:mod:`.measures` (step 3), :mod:`.state` (history, checkpoint), :mod:`.clock` (the run loop's
steps), :mod:`.config` (its options)."""
from vecgossip.engines.rounds.config import RoundOptions  # noqa: F401
from vecgossip.engines.rounds.engine import RoundEngine  # noqa: F401
from vecgossip.engines.rounds.state import RoundHistory  # noqa: F401
