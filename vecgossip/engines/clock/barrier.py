"""Rounds with a per-node barrier in virtual seconds (issue 48, ``clock.barrier=node``): D-PSGD as
Lian et al. (2017) run it, each node waiting only for its own in-neighbours, not for everyone.

A round of the round engine is one or more phases (its gossip steps): in phase p node i computes
for ``compute[p][i]`` seconds (its local steps in the round's first phase, 0 in the others),
then starts its messages of the phase (one per out-edge of the matrix mixed, in edge order),
then waits until every message addressed to it in phase p has arrived; then it starts phase
p + 1 at once. A fast node runs ahead of a slow one by as many phases as the graph lets it (a
node at distance d from a straggler is held back only once the straggler's delay has
travelled d hops); every transfer of every phase in flight at one time shares the links under
the policy (:mod:`.transfers`). Learning does not depend on time (each node averages exactly
its in-neighbours' messages of the phase, as under the global barrier), so the models are the
untimed run's and the clock adds the seconds beside them.

The phases are learnt one round at a time (the engine draws W_t as it goes), so the events run
conservatively: up to the first time a node has finished every phase known so far; its next
phase may start a transfer at that very time, so nothing at or after it runs until the next
round is known (:meth:`NodeBarrier.end_round`) or the run is over (:meth:`NodeBarrier.drain`).
A round's time is when its last node finishes it (every model of the round exists then):
rows measured before that are filled in when it is known (:meth:`NodeBarrier.fill`); a row's
mean idle time is that time minus the mean seconds computed so far, as under the global
barrier. Equal times: deliveries first, then the nodes that finish a phase (ascending), then the
sends due (ascending node, each node's messages in edge order); only a sender's own order
matters (FIFO uplinks), and it is the same however the rounds were learnt."""
from __future__ import annotations

import numpy as np

from vecgossip.engines.clock.rounds import RoundTimer, pair_latency
from vecgossip.engines.clock.transfers import Transfers


class NodeBarrier(RoundTimer):
    """The run's clock under per-node barriers (same inputs as :class:`~.rounds.RoundTimer`; no
    churn). :attr:`seconds`: the end of the last round every node has finished; :attr:`busy`:
    each node's compute of the rounds known; :attr:`idle`: :attr:`seconds` minus that."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        if self.churn is not None:
            raise ValueError("churn under per-node barriers: a round's fates would depend on later rounds' transfers; "
                             "it needs clock.barrier=global")
        self.flow = Transfers(self.uplink, self.downlink, self.policy)
        self.phase_of = np.zeros(self.n, np.int64)     # each node's phase (counted over the run)
        self.until = np.full(self.n, np.inf)        # when its compute of that phase ends (inf: not computing)
        self.sent = np.zeros(self.n, dtype=bool)    # it started that phase's messages; waits for its own
        self.plan: dict[int, dict] = {}             # phase -> its compute, messages, in-degrees, arrivals
        self.known = 0                              # phases known (pushed by :meth:`round`)
        self.round_phase: list[int] = []            # each round's last phase
        self.ends: list[float] = []                 # each finished round's end (all nodes)
        self.busy_at: dict[int, np.ndarray] = {}    # round -> each node's compute up to it (until it ends)
        self.idle_means: list[float] = []           # each finished round's mean idle seconds
        self.node_ends: list[np.ndarray] = []       # each finished round: (n,) when each node finished it
        self.closed = False                         # no round comes after the known ones

    # -- the rounds, as the engine learns them ------------------------------------------------------
    def phase(self, steps: np.ndarray, sender: np.ndarray, receiver: np.ndarray, size: np.ndarray) -> float:
        """One phase of the current round: ``steps`` (n,) local steps, then the messages
        ``sender[e] -> receiver[e]`` of ``size[e]`` bytes (sorted by sender). Returns nan: the
        phase's end is known later."""
        sender, receiver = np.asarray(sender, np.int64), np.asarray(receiver, np.int64)
        compute = self.account(steps, sender, size)
        p = self.known
        self.plan[p] = {"compute": compute, "sender": sender, "receiver": receiver,
                        "ptr": np.searchsorted(sender, np.arange(self.n + 1)),
                        "size": np.asarray(size, float).copy(),
                        "indeg": np.bincount(receiver, minlength=self.n), "got": np.zeros(self.n, np.int64),
                        "done": 0, "end": 0.0, "ends": np.zeros(self.n)}
        self.known += 1
        waiting = np.flatnonzero(self.phase_of == p)          # nodes that finished every earlier phase
        self.until[waiting] = self.flow.now + compute[waiting]
        return float("nan")

    def end_round(self) -> None:
        """The round's phases are known: run every event that cannot depend on the next round."""
        self.round_phase.append(self.known - 1)
        self.busy_at[len(self.round_phase) - 1] = self.busy.copy()
        self._run()

    def drain(self) -> None:
        """No round comes after the known ones: run every event to the end."""
        self.closed = True
        self._run()

    # -- the events -----------------------------------------------------------------------------------
    compiled = True     # every event in one compiled call (issue 56; :mod:`.barrier_kernel`); False: step by step

    def _run(self) -> None:
        if not self.compiled or self.flow.policy == "greedy":
            return self._run_steps()
        from vecgossip.engines.clock.barrier_kernel import run_nodes
        from vecgossip.engines.clock.transfers import _REL
        f, n = self.flow, self.n
        plans = [self.plan[p] for p in sorted(self.plan)]      # the known phases not over: pmin .. known - 1
        pmin = min(self.plan, default=self.known)

        def rows(key, dtype, width=n):
            return np.array([x[key] for x in plans], dtype).reshape(len(plans), width)

        def edges(key, dtype):
            return np.concatenate([x[key] for x in plans]).astype(dtype) if plans else np.zeros(0, dtype)
        eoff = np.concatenate([[0], np.cumsum([x["sender"].size for x in plans])]).astype(np.int64)
        got, ends = rows("got", np.int64), rows("ends", float)
        esend, erecv = edges("sender", np.int64), edges("receiver", np.int64)
        done, end = np.array([x["done"] for x in plans], np.int64), np.array([x["end"] for x in plans], float)
        now, keep, *arrays, counter, over_p, over_t = run_nodes(
            f.sender, f.receiver, f.size, f.left, f.latency, f.sent_at, f.seq, f._rate, f._carried,
            f.tag.astype(np.int64), f.counter, f._caps(), n, f.policy == "fifo", f.now, f._level0,
            np.asarray(f._seeds, np.int64), _REL, pair_latency(self.latency, esend, erecv), self.phase_of,
            self.until, self.sent, pmin, self.known, self.closed, rows("compute", float), rows("indeg", np.int64),
            got, done, end, ends, eoff, rows("ptr", np.int64, n + 1), esend, erecv, edges("size", float))
        (f.sender, f.receiver, f.size, f.left, f.latency, f.sent_at, f.seq, f._rate, f._carried,
         f.tag) = (x[keep] for x in arrays)
        f.begin = np.full(keep.size, -np.inf)
        f._level0, f._stale, f._seeds = np.inf, False, []
        f.now, f.counter = float(now), int(counter)
        for q, x in enumerate(plans):
            x["got"][:], x["done"], x["end"], x["ends"][:] = got[q], int(done[q]), float(end[q]), ends[q]
        for p, t in zip(over_p, over_t):
            self._phase_over(int(p), float(t))

    def _count(self, receivers: np.ndarray, tags: np.ndarray) -> None:
        for p in np.unique(tags):
            np.add.at(self.plan[int(p)]["got"], receivers[tags == p], 1)

    def _run_steps(self) -> None:
        """:meth:`_run` event by event (``advance``, ``next_event``): the greedy policy's path and
        the compiled path's twin in the tests."""
        while True:
            self._settle()
            if not self.closed and (self.phase_of >= self.known).any():
                return               # a node waits for the next round: its sends may start now
            t = min(float(self.until.min(initial=np.inf)), self.flow.next_event())
            if not np.isfinite(t):
                return
            self.flow.advance(t)

    def _settle(self) -> None:
        """Everything due at :attr:`flow.now`, to a fixed point (a zero-compute phase sends at
        once; a zero-byte, zero-latency message arrives at once)."""
        f = self.flow
        while True:
            arrived = f.delivered()
            self._count(f.receiver[arrived], f.tag[arrived])
            f.remove(arrived)
            waiting = np.flatnonzero(self.sent)
            ready = np.zeros(waiting.size, dtype=bool)
            for p, nodes, sel in self._by_phase(waiting):
                ready[sel] = self.plan[p]["got"][nodes] >= self.plan[p]["indeg"][nodes]
            finished = waiting[ready]
            self._finish(finished)
            due = np.flatnonzero(self.until <= f.now)
            self._send(due)
            if not (arrived.size or finished.size or due.size):
                return

    def _by_phase(self, nodes: np.ndarray):
        """(phase, its nodes, their mask in ``nodes``) for each phase ``nodes`` are in."""
        ph = self.phase_of[nodes]
        for p in np.unique(ph):
            sel = ph == p
            yield int(p), nodes[sel], sel

    def _finish(self, nodes: np.ndarray) -> None:
        """``nodes`` finish their phase now and start the next one (if known)."""
        if not nodes.size:
            return
        now = self.flow.now
        for p in np.unique(self.phase_of[nodes]):
            plan = self.plan[int(p)]
            plan["done"] += int((self.phase_of[nodes] == p).sum())
            plan["end"] = max(plan["end"], now)
            plan["ends"][nodes[self.phase_of[nodes] == p]] = now
            if plan["done"] == self.n:                 # every node is past phase p
                self._phase_over(int(p), plan["end"])
        self.sent[nodes] = False
        self.phase_of[nodes] += 1
        self.until[nodes] = np.inf
        for p, mine, _ in self._by_phase(nodes[self.phase_of[nodes] < self.known]):
            self.until[mine] = now + self.plan[p]["compute"][mine]

    def _phase_over(self, p: int, end: float) -> None:
        ends = self.plan.pop(p)["ends"]
        r = len(self.ends)
        if r < len(self.round_phase) and self.round_phase[r] == p:     # the round's last phase
            self.ends.append(end)
            self.node_ends.append(ends)
            busy = self.busy_at.pop(r)
            self.idle_means.append(float(end - busy.mean()))
            self.seconds = end
            self.idle = end - busy

    def _send(self, nodes: np.ndarray) -> None:
        """``nodes`` (ascending) finished computing now: their phase's messages start."""
        if not nodes.size:
            return
        parts = []
        for p, mine, _ in self._by_phase(nodes):
            plan = self.plan[p]
            lo, hi = plan["ptr"][mine], plan["ptr"][mine + 1]
            e = np.repeat(lo - np.r_[0, np.cumsum(hi - lo)[:-1]], hi - lo) + np.arange(int((hi - lo).sum()))
            parts.append((plan["sender"][e], plan["receiver"][e], plan["size"][e], np.full(e.size, p)))
        s, r, size, tag = (np.concatenate(x) for x in zip(*parts))
        self.flow.start(s, r, size, self.latency[s, r], tag)
        self.until[nodes] = np.inf
        self.sent[nodes] = True

    # -- the metrics rows -------------------------------------------------------------------------
    def row(self, rounds: int) -> dict:
        if rounds == 0:
            return {"seconds": 0.0, "idle_seconds_mean": 0.0}
        if rounds <= len(self.ends):
            return {"seconds": self.ends[rounds - 1], "idle_seconds_mean": self.idle_means[rounds - 1]}
        return {"seconds": float("nan"), "idle_seconds_mean": float("nan")}

    def fill(self, rows: list[dict]) -> list[int]:
        """The trailing rows still without a time (their rounds' ends become known in order)."""
        filled = []
        for k in range(len(rows) - 1, -1, -1):
            if not np.isnan(rows[k]["seconds"]):
                break
            times = self.row(int(rows[k]["round"]))
            if not np.isnan(times["seconds"]):
                rows[k].update(times)
                filled.append(k)
        return filled

    # -- checkpoints ------------------------------------------------------------------------------
    def state(self) -> dict:
        return {**super().state(), "flow": self.flow.state(), "phase": self.phase_of.copy(), "until": self.until.copy(),
                "sent": self.sent.copy(), "plan": {p: {k: (v.copy() if isinstance(v, np.ndarray) else v)
                                                       for k, v in d.items()} for p, d in self.plan.items()},
                "known": self.known, "round_phase": list(self.round_phase), "ends": list(self.ends),
                "busy_at": {r: v.copy() for r, v in self.busy_at.items()}, "idle_means": list(self.idle_means),
                "node_ends": [v.copy() for v in self.node_ends], "closed": self.closed}

    def load(self, d: dict) -> None:
        super().load(d)
        self.flow.load(d["flow"])
        self.phase_of, self.until, self.sent = (np.array(d[k]) for k in ("phase", "until", "sent"))
        self.plan = {int(p): {"ends": np.zeros(self.n),        # (a checkpoint from before they were kept)
                              **{k: (np.array(v) if isinstance(v, np.ndarray) else v) for k, v in x.items()}}
                     for p, x in d["plan"].items()}
        self.known, self.closed = int(d["known"]), bool(d["closed"])
        self.round_phase, self.ends, self.idle_means = list(d["round_phase"]), list(d["ends"]), list(d["idle_means"])
        self.busy_at = {int(r): np.array(v) for r, v in d["busy_at"].items()}
        self.node_ends = [np.array(v) for v in d.get("node_ends", [])]   # (a checkpoint before them: none)
