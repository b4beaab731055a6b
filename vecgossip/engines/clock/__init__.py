"""Time in seconds (issue 48): the parts of a virtual wall clock, each a pure model over
node-first arrays on the host, and the round engine's rounds timed with them.

- :mod:`.compute`: each node's seconds per local step (constant, lognormal, Pareto, a straggler
  fraction x slowdown, or a FedScale device-capacity trace);
- :mod:`.links`: each node's uplink and downlink bandwidth (groups of nodes, e.g. Biswas et al.'s (WWW 2025) 53 at
  60 Mbps and 7 at 10-13 Mbps) and the pairwise latency (a constant or a matrix file);
- :mod:`.transfers`: the messages in flight and their rates under max-min fair sharing of every
  uplink and downlink (or FIFO uplinks), advanced from one event to the next;
- :mod:`.events`: the event heap keyed by (time, sequence), popped in waves (every event within
  ``resolution`` seconds of the first: one batched step);
- :mod:`.traces`: FedScale's device-capacity and client-behaviour formats, read and generated;
- :mod:`.rounds`: a barrier round of the round engine (compute, then one message per edge of
  W_t) in seconds, and the run's :class:`~.rounds.RoundTimer`;
- :mod:`.barrier`: rounds with a per-node barrier (``clock.barrier=node``: each node waits for
  its in-neighbours only; rounds overlap), :class:`~.barrier.NodeBarrier`;
- :mod:`.churn`: who is online at a time (Bernoulli slots, exponential sessions, diurnal, a
  FedScale behaviour trace), a pure function of the seed and the time;
- :mod:`.config`: the ``clock`` group (``clock.enabled=true`` times a round-engine run, and runs
  the tick engine's gossip learning in seconds: :mod:`vecgossip.engines.tick.timed`).

The event loop is host work over every node's arrays: under torchrun it runs replicated on every
rank (the same events in the same order), timed rounds and the tick engine's methods in seconds
shard (docs/scale-out.md). Not built yet (issue 48): a node leaving in the middle of a barrier
round (the tick engine in seconds aborts an offline node's transfers); server methods and
faults are refused so far."""
