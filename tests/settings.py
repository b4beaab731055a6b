"""The tests' small tick-engine settings: every knob a test varies in one dataclass (what paper 1's
algorithm and the engine's options would say), turned into a :class:`TickEngine` the way
composition does (options, the algorithm, the data), so that engine tests need no config file."""
from __future__ import annotations

from dataclasses import dataclass

from vecgossip.algorithms.fedavg_tick import FedAvgTick, Params as FedParams
from vecgossip.algorithms.gossip import GossipLearning, Params
from vecgossip.engines.tick.config import TickOptions
from vecgossip.engines.tick.engine import TickData, TickEngine
from vecgossip.engines.tick.measures import EvalSet
from vecgossip.network.peers import TLConfig


@dataclass(frozen=True)
class TickSetting:
    t_acq: tuple[int, int] = (10, 10)
    R: int = 1
    beta: float = 0.5
    correction: bool = False
    compression: float = 1.0
    server: int | None = None           # FedAvg's relay server (node 0)
    tl: TLConfig | None = None          # the transfer-learning peer rule
    batch_size: int = 64
    max_ticks: int = 10_000
    eval_every: int = 10
    early_stop: bool = False
    threshold: float = 0.9
    most_frac: float = 0.9
    eval_chunk: int = 256
    train_chunk: int = 256
    on_divergence: str = "stop"
    timeout: int = 30                   # faults: a buffer held this many ticks averages what arrived

    def options(self) -> TickOptions:
        options = TickOptions(t_acq=list(self.t_acq), max_ticks=self.max_ticks, eval_every=self.eval_every,
                              early_stop=self.early_stop, threshold=self.threshold, most_frac=self.most_frac,
                              eval_chunk=self.eval_chunk, train_chunk=self.train_chunk,
                              on_divergence=self.on_divergence)
        tl = (self.tl or TLConfig()).model_copy(update={"enabled": self.tl is not None})
        return options.model_copy(update={"tl": tl})     # a test's TL setting as given (add_at 0: everyone adds)

    def algorithm(self):
        if self.server is not None:
            return FedAvgTick(FedParams(self.beta, self.correction))
        return GossipLearning(Params(self.beta, self.R, self.correction, self.compression, self.tl is not None))


def tick_engine(setting: TickSetting, state, links, forward, sgd, train, probs, eval_x, eval_y, gen, rng,
                test=None, faults=None, shards=None, eval_idx=None, **kw) -> TickEngine:
    """A tick engine from a test's setting (the old positional order of its parts)."""
    data = TickData(train, EvalSet(eval_x, eval_y, test, eval_idx), setting.batch_size, probs, shards)
    if faults is not None and faults.cfg.timeout != setting.timeout:
        faults.cfg = faults.cfg.model_copy(update={"timeout": setting.timeout})
    return TickEngine(setting.options(), setting.algorithm(), state, links, forward, sgd, data, gen, rng,
                      faults=faults, **kw)
