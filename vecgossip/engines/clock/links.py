"""Each node's uplink and downlink bandwidth and the pairwise latency (issue 48).

Bandwidth is given in Mbit/s (10^6 bits a second) as groups of nodes, in node order after a
shuffle drawn from the seed: ``[{nodes: 53, mbps: 60}, {nodes: 7, mbps: [10, 13]}]`` is Biswas et al.'s
setting (53 nodes at 60 Mbps, 7 drawn uniformly in 10-13 Mbps); one number is every node's;
``null`` is no limit. Downlinks are the uplinks unless given. Latency: seconds one way, a constant,
or a square matrix file (milliseconds; comma- or space-separated rows, row = sender; a matrix
smaller than the run is tiled over the nodes, as the field's simulators reuse a measured matrix).
A server (FedAvg, FedBuff) is one more node: ``server`` Mbit/s both ways (null: no limit) and
``server_latency`` seconds to every client (null: ``latency`` when it is a number; a matrix file
needs it given)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional, Union

import numpy as np
from omegaconf import ListConfig
from pydantic import Field, ValidationError, ValidationInfo, field_validator

from vecgossip.core.options import Options

Mbps = Annotated[float, Field(gt=0)]


class Group(Options):
    nodes: Annotated[int, Field(ge=1)]                  # how many nodes have this bandwidth
    mbps: Union[Mbps, tuple[Mbps, Mbps]]                # one value, or [lo, hi] drawn uniformly per node

    @field_validator("mbps", mode="before")
    @classmethod
    def _range(cls, v):
        """[lo, hi] as the command line and YAML write it (a list)."""
        if isinstance(v, (list, ListConfig)):
            if len(v) != 2 or v[0] > v[1]:
                raise ValueError(f"a bandwidth range is [lo, hi] with lo <= hi, got {list(v)}")
            return tuple(v)
        return v


class LinksConfig(Options):
    """Bandwidth per node and latency per pair."""

    uplink: Union[None, Mbps, list[Group]] = None       # Mbit/s (null: no limit)
    downlink: Union[None, Mbps, list[Group]] = None     # Mbit/s (null: the uplinks')
    latency: Union[Annotated[float, Field(ge=0, allow_inf_nan=False)], str] = 0.0   # seconds, or a matrix file (ms)
    server: Optional[Mbps] = None                       # a server's uplink and downlink, Mbit/s (null: no limit)
    server_latency: Optional[Annotated[float, Field(ge=0, allow_inf_nan=False)]] = None   # s client <-> server (null: latency's)

    @field_validator("uplink", "downlink", mode="before")
    @classmethod
    def _groups(cls, v, info: ValidationInfo):
        """Groups as typed (a list of {nodes, mbps}): each checked here, so that a bad one's
        message says what is wrong with it, not only that the union did not match."""
        if not isinstance(v, (list, ListConfig)):
            return v
        out = []
        for k, g in enumerate(v):
            try:
                out.append(g if isinstance(g, Group) else Group.model_validate(dict(g)))
            except (ValidationError, TypeError, ValueError) as err:
                e = err.errors()[0] if isinstance(err, ValidationError) else {"loc": (), "msg": str(err)}
                where = "".join(f".{p}" for p in e["loc"])
                raise ValueError(f"clock.links.{info.field_name}[{k}]{where}: {e['msg'].removeprefix('Value error, ')} "
                                 "(a group takes nodes (an integer >= 1) and mbps (Mbit/s, or [lo, hi]))") from None
        return out


def bandwidth(spec, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n,) bytes a second from a spec (None: inf; a number: every node; groups: shuffled)."""
    if spec is None:
        return np.full(n, np.inf)
    if not isinstance(spec, list):
        return np.full(n, float(spec) * 1e6 / 8)
    total = sum(g.nodes for g in spec)
    if total != n:
        raise ValueError(f"the bandwidth groups hold {total} nodes, the run has {n}")
    mbps = np.concatenate([rng.uniform(*g.mbps, g.nodes) if isinstance(g.mbps, tuple) else np.full(g.nodes, g.mbps)
                           for g in spec])
    return mbps[rng.permutation(n)] * 1e6 / 8


class Latency:
    """(n, n) one-way seconds, row = sender, held as the tile it repeats: a constant is a 1 x 1
    tile, a file's k x k matrix is tiled over n nodes (node i is site i mod k); 0 from a node to
    itself. O(k^2) memory, not O(n^2) (a dense matrix would hold 800 MB at 10,000 nodes and 80 GB
    at 100,000; issue 56). ``lat[s, r]`` (index arrays) gives the pairs' seconds;
    ``np.asarray(lat)`` the dense matrix."""

    def __init__(self, tile: np.ndarray, n: int) -> None:
        self.tile, self.n = np.asarray(tile, float), int(n)
        self.shape = (self.n, self.n)

    def __getitem__(self, key) -> np.ndarray:
        s, r = (np.asarray(x) for x in key)
        k = self.tile.shape[0]
        return np.where(s == r, 0.0, self.tile[s % k, r % k])

    def any(self) -> bool:
        """Whether some pair of distinct nodes has a latency."""
        k = self.tile.shape[0]
        if self.n <= k:
            sub = self.tile[:self.n, :self.n]
            return bool((sub[~np.eye(self.n, dtype=bool)] != 0).any())
        off = self.tile[~np.eye(k, dtype=bool)] != 0                # every off-diagonal tile pair occurs
        return bool(off.any() or (np.diag(self.tile)[:max(self.n - k, 0)] != 0).any())   # (i, i + k)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        idx = np.arange(self.n) % self.tile.shape[0]
        out = self.tile[np.ix_(idx, idx)].astype(dtype or float)
        np.fill_diagonal(out, 0.0)
        return out

    def tolist(self) -> list:
        return np.asarray(self).tolist()


def latency_matrix(spec, n: int) -> Latency:
    """(n, n) seconds (:class:`Latency`): a constant (0 on the diagonal) or a file's
    milliseconds, tiled to n nodes."""
    if not isinstance(spec, str):
        return Latency(np.full((1, 1), float(spec)), n)
    text = Path(spec).read_text().replace(",", " ").split("\n")
    rows = [list(map(float, line.split())) for line in text if line.strip() and not line.lstrip().startswith("#")]
    m = np.array(rows)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"{spec}: a latency matrix is square, got {m.shape}")
    if (m < 0).any() or not np.isfinite(m).all():
        raise ValueError(f"{spec}: latencies are finite milliseconds >= 0")
    return Latency(m / 1000.0, n)


def server_links(cfg: LinksConfig) -> tuple[float, float]:
    """(bytes/s of the server's uplink and downlink, seconds one way client <-> server)."""
    rate = np.inf if cfg.server is None else float(cfg.server) * 1e6 / 8
    if cfg.server_latency is not None:
        return rate, float(cfg.server_latency)
    if isinstance(cfg.latency, str):
        raise ValueError("clock.links.latency is a matrix file: give clock.links.server_latency (seconds) for the "
                         "server's links")
    return rate, float(cfg.latency)
