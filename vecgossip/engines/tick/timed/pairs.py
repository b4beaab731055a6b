"""Paired messages, a request and its reply (issue 55: a generic mechanism on the timed message):
node i and its peer j each send the other its model at i's step; when both have arrived the pair
completes: x_i, x_j <- (x_i + x_j) / 2, then i's gradient (computed at the model it read) applies.
Pairs complete in the order their second message arrives; churn cuts a pair in flight (no average;
i's gradient alone if i is online, lost with it if not)."""
from __future__ import annotations

import numpy as np

from vecgossip.core.device import upload

PAIRED = 1 << 50    # transfer tags from here on are paired messages (2 x pair id + direction)


class PairedMessages:
    """The pairs half of :class:`~.transport.TimedTransport`."""

    def init_pairs(self) -> None:
        self.pairs = no_pairs()                 # pairs in flight, node-first arrays by id
        self.pair_grads: dict[int, list] = {}   # gradient wave -> [(M, P) gradients, pairs pending]
        self.next_pair = 0
        self.cut_pairs = np.zeros(0, dtype=np.int64)  # churn: pairs that lost a message at this window's start

    def pairs_state(self) -> dict:
        return {"pairs": {k: v.copy() for k, v in self.pairs.items()},
                "pair_grads": {k: [v[0], v[1]] for k, v in self.pair_grads.items()}, "next_pair": self.next_pair}

    def load_pairs(self, d: dict) -> None:
        self.pairs = {k: np.asarray(v).copy() for k, v in d["pairs"].items()}
        self.pair_grads = {int(k): [v[0].to(self.device), int(v[1])] for k, v in d["pair_grads"].items()}
        self.next_pair = int(d["next_pair"])

    @property
    def pairs_in_flight(self) -> int:
        """How many pairs are in flight."""
        return int(self.pairs["id"].size)

    def start_pairs(self, engine, nodes: np.ndarray, pairs: list[tuple[int, int]], grads) -> np.ndarray:
        """Each pair (i, j) starts two messages of the model's bytes at i's step time, i -> j and
        j -> i (in pair order); a node without a pair applies its gradient now. Every pair
        complete before this window ends applies (:meth:`complete`)."""
        t = self.schedule.now
        cut = self.cut_offline(engine)                   # churn: pairs cut at this window's start
        wave = self.wave
        self.wave += 1
        init = np.array([p[0] for p in pairs], dtype=np.int64)
        peer = np.array([p[1] for p in pairs], dtype=np.int64)
        online = self.schedule.online
        if online is not None and init.size:             # a peer offline: no pair (2 messages never
            self.aborted += 2 * int((~online[peer]).sum())    # started), the initiator's step alone
            init, peer = init[online[peer]], peer[online[peer]]
        solo = np.setdiff1d(nodes, init)
        self.pair_grads[wave] = [grads, init.size]
        first = self.shard.block(nodes).start            # grads: this process's rows of nodes, from this position
        here = solo[self.shard.block(solo)]
        bad = (engine.average_pairs([], solo, grads[upload(np.searchsorted(nodes, here) - first, grads.device)])
               if solo.size else nodes[:0])
        bad = np.union1d(bad, cut)
        if init.size:
            ids = self.next_pair + np.arange(init.size)
            self.next_pair += init.size
            rows = np.where(self.mine(init), np.searchsorted(nodes, init) - first, -1)   # in grads (-1: elsewhere)
            at = self.schedule.sent_at[init]
            new = {"id": ids, "i": init, "j": peer, "wave": np.full(init.size, wave), "row": rows,
                   "got": np.zeros(init.size, dtype=np.int64), "start": at.astype(float)}
            self.pairs = {k: np.concatenate([v, new[k]]) for k, v in self.pairs.items()}
            s_ = np.stack([init, peer], 1).ravel()               # i -> j, then j -> i, pair by pair
            r_ = np.stack([peer, init], 1).ravel()
            tags = PAIRED + 2 * np.repeat(ids, 2) + np.tile([0, 1], init.size)
            self.begin(np.repeat(at, 2), s_, r_, self.message_bytes, tags)   # in time order; at one time in pair order
            self.bytes_sent += np.bincount(s_, minlength=self.n) * self.message_bytes
        return np.union1d(bad, self.complete(engine, (t + 1) * self.clock.resolution))

    def complete(self, engine, end: float) -> np.ndarray:
        """Every pair whose two messages arrive before ``end``: in the order they complete
        (time, then start order), the pairs' averages, then each initiator's gradient (a node
        whose pairs complete twice in one window steps once per pair, in order)."""
        self.run_until(end, strict=True)
        if not self.arrived:
            return np.zeros(0, dtype=np.int64)
        tag = np.concatenate([a[1] for a in self.arrived])
        when = np.concatenate([np.full(a[1].size, a[2]) for a in self.arrived])
        self.arrived = [(r[t < PAIRED], t[t < PAIRED], w, s[t < PAIRED]) for r, t, w, s in self.arrived
                        if (t < PAIRED).any()]
        ex = tag >= PAIRED
        if not ex.any():
            return np.zeros(0, dtype=np.int64)
        p = self.pairs
        at = np.searchsorted(p["id"], (tag[ex] - PAIRED) // 2)          # ids ascend: started in order
        np.add.at(p["got"], at, 1)
        last = np.full(p["id"].size, -np.inf)
        np.maximum.at(last, at, when[ex])                                  # the second message's arrival
        done = np.flatnonzero(p["got"] == 2)
        if not done.size:
            return np.zeros(0, dtype=np.int64)
        d = done[np.lexsort((p["id"][done], last[done]))]                  # completion order
        i, j, took = p["i"][d], p["j"][d], last[d] - p["start"][d]
        for side in (i, j):
            np.add.at(self.received, side, 1)
            np.add.at(self.staleness, side, took)                         # the pair's duration
        none = np.zeros(0, dtype=np.int64)
        bad = [engine.average_pairs(list(zip(i.tolist(), j.tolist())), none, None)]
        return np.unique(np.concatenate(bad + self.finish(engine, d, d)))

    def finish(self, engine, d: np.ndarray, apply: np.ndarray) -> list[np.ndarray]:
        """Pairs ``d`` (positions in :attr:`pairs`) end: the initiators' gradients of those
        in ``apply`` (a subsequence of ``d``) apply in its order (a node with several steps in one
        window once per pair, in order); all of ``d`` leave :attr:`pairs` and release their
        gradients. Returns the nodes no longer finite."""
        p = self.pairs
        bad = []
        i = p["i"][apply]
        by = np.argsort(i, kind="stable")                                  # each initiator once per round, in order
        first = np.r_[True, i[by][1:] != i[by][:-1]]
        rank = np.empty(apply.size, dtype=np.int64)
        rank[by] = np.arange(apply.size) - np.maximum.accumulate(np.where(first, np.arange(apply.size), 0))
        wave, row = p["wave"][apply], p["row"][apply]
        for k in range(int(rank.max(initial=-1)) + 1):
            sel = np.flatnonzero(rank == k)
            sel = sel[np.argsort(i[sel], kind="stable")]
            local = sel[row[sel] >= 0]                                     # this process's initiators (sharded)
            some = self.pair_grads[int(wave[sel[0]])][0]
            g = some.new_empty(local.size, some.shape[1])
            for w in np.unique(wave[local]):
                m = np.flatnonzero(wave[local] == w)
                src = self.pair_grads[int(w)][0]
                g[upload(m, src.device)] = src[upload(row[local][m], src.device)]
            bad.append(engine.average_pairs([], i[sel], g))
        for w, c in zip(*np.unique(p["wave"][d], return_counts=True)):
            self.pair_grads[int(w)][1] -= int(c)
            if self.pair_grads[int(w)][1] == 0:
                del self.pair_grads[int(w)]
        keep = np.ones(p["id"].size, dtype=bool)
        keep[d] = False
        self.pairs = {k: v[keep] for k, v in p.items()}
        return bad

    def cut_offline(self, engine) -> np.ndarray:
        """Churn, at a window's start: every transfer from or to an offline node is lost
        (:meth:`abort`); an pair that loses a message is cut: no average, its initiator's
        gradient applies alone now if it is online, and is lost with it if not (in pair
        order). Returns the nodes no longer finite."""
        online = self.schedule.online
        none = np.zeros(0, dtype=np.int64)
        if online is None:
            return none
        self.abort(np.flatnonzero(~online))
        if not self.cut_pairs.size:
            return none
        ids, self.cut_pairs = self.cut_pairs, none
        kept = []                               # a cut pair's message that arrived at the window's start
        for r, tag, w, s in self.arrived:
            keep = (tag < PAIRED) | ~np.isin((tag - PAIRED) // 2, ids)
            kept.append((r[keep], tag[keep], w, s[keep]))
        self.arrived = kept
        d = np.flatnonzero(np.isin(self.pairs["id"], ids))                 # ids ascend: pair order
        bad = self.finish(engine, d, d[online[self.pairs["i"][d]]])
        return np.unique(np.concatenate([none, *bad]))


def no_pairs() -> dict[str, np.ndarray]:
    """No pair in flight: ids, initiators, peers, gradient waves and rows, messages arrived
    (int64), start times (float)."""
    return {**{k: np.zeros(0, dtype=np.int64) for k in ("id", "i", "j", "wave", "row", "got")},
            "start": np.zeros(0)}

