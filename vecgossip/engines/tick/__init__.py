"""The tick engine (paper 1, section III-A, Algorithm 2): :mod:`.engine` (the clock and the
training step), :mod:`.transport` (sending into buffers), :mod:`.buffer` (model buffers, Eq. 1),
:mod:`.sparse_send` (section III-C2's compressed sends), :mod:`.measures` (metrics, the peer rule),
:mod:`.state` (the checkpoint)."""
from vecgossip.engines.tick.engine import TickConfig, TickEngine  # noqa: F401
from vecgossip.engines.tick.state import History  # noqa: F401
