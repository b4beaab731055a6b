"""The tick engine (paper 1, section III-A, Algorithm 2): :mod:`.engine` (the engine, its training
and merging steps and the services an algorithm gets), :mod:`.training` (step 1 batched over a
group), :mod:`.schedule` (who trains when), :mod:`.wiring` (the active links), :mod:`.transport`
(step 2: sending into buffers), :mod:`.buffer` (model buffers, Eq. 1), :mod:`.sparse_send`
(section III-C2's compressed sends), :mod:`.measures` (step 4: metrics, the peer rule),
:mod:`.state` (history, checkpoint), :mod:`.clock` (the run loop's steps), :mod:`.config` (its
options)."""
from vecgossip.engines.tick.config import TickOptions  # noqa: F401
from vecgossip.engines.tick.engine import TickData, TickEngine  # noqa: F401
from vecgossip.engines.tick.state import History  # noqa: F401
