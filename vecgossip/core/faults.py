"""Faults as features, for both engines: lost messages, offline nodes, scheduled crash and rejoin.

- ``drop``: every message (one model on one link, one send) is lost independently with this
  probability.
- ``offline``: at every step of the clock (a tick the engine processes, or a round) every node is
  offline independently with this probability: it neither trains, sends nor receives (messages to
  it are lost), and does not average.
- ``crash_at`` / ``rejoin_at``: the nodes ``crash_nodes`` are offline from step ``crash_at`` until
  step ``rejoin_at`` (crash-stop when ``rejoin_at`` is null), whatever ``offline`` draws.
- ``timeout`` (tick engine): a buffer that has held models for this many ticks averages what
  arrived, so a node never waits forever for models that were lost or whose senders are gone.

Draws come from their own generator (seeded from the run's seed), only for the probabilities that
are not zero: with no fault configured nothing is drawn and the engines run exactly as without this
module. Counters: messages sent and lost, nodes online (metrics columns).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Optional

import numpy as np
from pydantic import Field, field_validator, model_validator

from vecgossip.core.options import Options


Probability = Annotated[float, Field(ge=0, le=1)]


class FaultConfig(Options):
    """The ``faults`` group (both engines; all off by default)."""

    drop: Probability = 0.0                   # each message (one link, one send) is lost with this probability
    offline: Probability = 0.0                # each node is offline at a tick / in a round with this probability
    crash_at: Optional[Annotated[int, Field(ge=0)]] = None    # tick/round at which crash_nodes go offline ...
    rejoin_at: Optional[Annotated[int, Field(ge=0)]] = None   # ... until this tick/round (null: for good)
    crash_nodes: tuple[Annotated[int, Field(ge=0)], ...] = ()  # node indices
    timeout: Annotated[int, Field(ge=1)] = 30  # tick engine: a buffer held this many ticks averages what arrived

    @field_validator("crash_nodes", mode="before")
    @classmethod
    def _listed(cls, v):
        return tuple(v) if isinstance(v, list) else v

    @model_validator(mode="after")
    def _schedule(self) -> "FaultConfig":
        if self.rejoin_at is not None and (self.crash_at is None or self.rejoin_at <= self.crash_at):
            raise ValueError(f"faults.rejoin_at={self.rejoin_at} needs faults.crash_at < rejoin_at, "
                             f"got crash_at={self.crash_at}")
        if self.crash_at is not None and not self.crash_nodes:
            raise ValueError("faults.crash_at is set but faults.crash_nodes is empty: name the nodes that crash")
        return self

    @property
    def active(self) -> bool:
        return self.drop > 0 or self.offline > 0 or self.crash_at is not None


@dataclass
class Faults:
    """The fault draws of one run. ``online(step)`` and ``kept(n)`` are the only sources of fault
    randomness, called in a fixed order by the engines (and by the loop twins in the tests)."""

    cfg: FaultConfig
    n: int
    rng: np.random.Generator
    sent: int = 0
    lost: int = 0
    crash: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.crash = np.zeros(self.n, dtype=bool)
        nodes = np.asarray(self.cfg.crash_nodes, dtype=np.int64)
        if nodes.size and (nodes.min() < 0 or nodes.max() >= self.n):
            raise ValueError(f"faults.crash_nodes must be node indices in [0, {self.n}), got {list(self.cfg.crash_nodes)}")
        self.crash[nodes] = True

    def online(self, step: int) -> np.ndarray:
        """(N,) bool: who is online at this step (crash schedule, then independent draws)."""
        c = self.cfg
        up = np.ones(self.n, dtype=bool)
        if c.crash_at is not None and step >= c.crash_at and (c.rejoin_at is None or step < c.rejoin_at):
            up &= ~self.crash
        if c.offline > 0:
            up &= self.rng.random(self.n) >= c.offline
        return up

    def kept(self, n: int) -> np.ndarray:
        """(n,) bool: which of n messages arrive (each lost with probability ``drop``)."""
        if self.cfg.drop <= 0:
            return np.ones(n, dtype=bool)
        return self.rng.random(n) >= self.cfg.drop

    def count(self, sent: int, lost: int) -> None:
        self.sent += int(sent)
        self.lost += int(lost)

    def state(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "sent": self.sent, "lost": self.lost}

    def load(self, d: dict) -> None:
        self.rng.bit_generator.state = d["rng"]
        self.sent, self.lost = d["sent"], d["lost"]


LOSS_RULES = ("receiver", "sender", "renormalise")


class Fates:
    """One step's fate of every message: the message j -> i arrives or is lost ONCE per step
    (one message carries every tensor mixed over that link then), whatever matrix mixes over it,
    in what order, and whether it is the same Python object or an equal copy. Links are drawn
    the first time a matrix of the step uses them (``faults.kept``, in that matrix's row-major
    order: a step that mixes one matrix draws exactly as before Fates existed) and counted then."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.links = np.zeros(0, dtype=np.int64)     # sorted i * n + j of the links decided this step
        self.kept = np.zeros(0, dtype=bool)

    def decide(self, i: np.ndarray, j: np.ndarray, faults: "Faults") -> tuple[np.ndarray, np.ndarray]:
        """(kept (E,), new (E,)): the drop draw of each link i <- j (row-major order), drawn now
        for the links this step has not decided yet (``new``)."""
        key = i.astype(np.int64) * self.n + j
        pos = np.searchsorted(self.links, key)
        known = (pos < self.links.size) & (self.links[np.minimum(pos, max(self.links.size - 1, 0))] == key) \
            if self.links.size else np.zeros(key.size, dtype=bool)
        out = np.zeros(key.size, dtype=bool)
        out[known] = self.kept[pos[known]]
        new = ~known
        out[new] = faults.kept(int(new.sum()))
        if new.any():
            links = np.concatenate([self.links, key[new]])
            order = np.argsort(links, kind="stable")
            self.links, self.kept = links[order], np.concatenate([self.kept, out[new]])[order]
        return out, new


def matrix_key(w) -> tuple:
    """(w as canonical float64 CSR, a digest of its content): what a matrix IS, so that an equal
    copy of a matrix is recognised as the same matrix (a step's realizations are keyed by it)."""
    import hashlib

    import scipy.sparse as sp
    csr = sp.csr_matrix(w, dtype=np.float64)
    csr.sum_duplicates()
    csr.sort_indices()
    h = hashlib.blake2b(digest_size=16)
    for a in (np.asarray(csr.shape, dtype=np.int64), csr.indptr.astype(np.int64), csr.indices.astype(np.int64),
              csr.data):
        h.update(np.ascontiguousarray(a).tobytes())
    return csr, h.hexdigest()


def faulty_weights(w, online: np.ndarray, faults: "Faults", rule: str = "receiver", fates: Fates | None = None):
    """A mixing matrix W (scipy sparse, (n, n)) as it acts under faults: the message j -> i (every
    off-diagonal W_ij, in row-major order) arrives if both are online and it is not dropped (one
    ``faults.kept`` draw per link and step: ``fates``, shared by every matrix mixed at the step;
    a fresh one when not given). A lost message's weight (``rule``): ``receiver``: i uses its
    own row in its place (W_ij moves to W_ii; row sums kept: D-PSGD's gossip); ``sender``: j keeps
    the mass it sent (W_ij moves to W_jj; column sums kept: push-sum conserves sum x and sum w);
    ``renormalise``: i averages what arrived (its row rescaled to its old sum: Epidemic
    Learning's receivers). Counts the step's messages once (attempted: the sender was online;
    lost). Returns (W as CSR, messages attempted)."""
    coo = w.tocoo()
    off = coo.row != coo.col
    i, j, v = coo.row[off], coo.col[off], coo.data[off]
    order = np.lexsort((j, i))
    i, j, v = i[order], j[order], v[order]
    attempted = online[j]
    dropped, new = (fates if fates is not None else Fates(w.shape[0])).decide(i, j, faults)
    keep = attempted & online[i] & dropped
    faults.count(int((attempted & new).sum()), int((attempted & ~keep & new).sum()))
    return lose(w, i, j, v, keep, rule), int(attempted.sum())


def lose(w, i: np.ndarray, j: np.ndarray, v: np.ndarray, keep: np.ndarray, rule: str):
    """W (scipy, (n, n)) whose off-diagonal messages j -> i of weight v are kept where ``keep``;
    a lost one's weight follows ``rule`` (:func:`faulty_weights`). Returns W as CSR."""
    import scipy.sparse as sp
    n = w.shape[0]
    if rule == "receiver":
        diag = w.diagonal() + np.bincount(i[~keep], weights=v[~keep], minlength=n)
    elif rule == "sender":
        diag = w.diagonal() + np.bincount(j[~keep], weights=v[~keep], minlength=n)
    else:
        diag = w.diagonal().astype(np.float64)
    w_q = (sp.coo_matrix((v[keep], (i[keep], j[keep])), shape=w.shape) + sp.diags(diag)).tocsr()
    if rule == "renormalise":
        before, after = np.asarray(w.sum(1)).ravel(), np.asarray(w_q.sum(1)).ravel()
        w_q = (sp.diags(np.divide(before, after, out=np.ones(n), where=after > 0)) @ w_q).tocsr()
    return w_q


def without(w, lost: np.ndarray, rule: str):
    """W (scipy) without the messages ``lost`` (keys receiver * n + sender), their weight moved
    by ``rule`` as a fault's would be (:func:`lose`). Returns W as CSR."""
    coo = w.tocoo()
    off = coo.row != coo.col
    i, j, v = coo.row[off], coo.col[off], coo.data[off]
    keep = ~np.isin(i.astype(np.int64) * w.shape[0] + j, lost)
    return lose(w, i, j, v, keep, rule)
