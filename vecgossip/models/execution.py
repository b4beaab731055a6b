"""How a chunk of nodes is computed: batched (the model's batched forward: the hand-written one of
LeNet / MLP / the CNN, else ``torch.func.vmap`` over the plain module) or per client (the plain
module, one node after another, on views of the stacked state: each node's rows are its parameters
and its BatchNorm running statistics, no copies), chosen by measurement (``model.exec``):

* ``batched`` / ``per_client``: as configured;
* ``auto``: training steps of each candidate on the chunk the batched path will run (its first
  ``train_chunk`` nodes, at most PROBE_CAP), timed with the device synchronized before and after
  each call, after one warm-up call of each (a path DROP times slower than the fastest there is
  not timed again), REPS calls of each alternated; the medians per node
  are compared and ``per_client`` replaces the batched default only when faster by more than
  MARGIN (10%); evaluation likewise for models without a hand-written batched forward (BatchNorm
  models in eval mode). The decision is cached per (package version, torch version, model, its
  parameter count and input shape, device (a GPU's name, or the CPU's vector extensions), batch,
  precision) in ``$VECGOSSIP_EXEC_CACHE``, else ``exec.json`` in ``$VECGOSSIP_CACHE`` or
  ``~/.cache/vecgossip`` (not per thread count: a torchrun rank and one process decide alike), so
  the same config makes the same choice run after run (and a resumed run the one its checkpoint
  recorded); summary.json records the choice, every timing, the probe's size, the margin and the
  seconds the decision took.

Per client, a training chunk is one node (``engine.train_chunk=auto``): each node's forward and
backward run before the next one's, as a per-node loop does, instead of one autograd graph over the
chunk's nodes (slower for ResNet-18 on the CPU: the chunk's activations stay alive together;
benchmarks/RESULTS.md). Per-client execution keeps every property of the batched one: the stacked optimiser, SAM, bf16
(autocast wraps either), BatchNorm statistics per client, replicas, shards, resume; the same
choice gives byte-identical outputs run to run, the two choices agree to float tolerance
(tests/test_execution.py)."""
from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

EXECS = ("auto", "batched", "per_client")
PROBE_CAP = 256    # nodes timed: the batched path's chunk, at most this many
REPS = 5           # timed calls of each path, alternated; their median is compared
DROP = 4.0         # a path this many times slower than the fastest in the warm-up is not timed further
MARGIN = 0.10      # per_client replaces the batched default only when its median is faster by more than this share


def per_client_forward(module: nn.Module):
    """The plain module for each node in turn: ``params`` {name: (N, ...)} (BatchNorm running
    statistics included, updated in place in training mode), x (N, B, ...) -> logits (N, B, classes).
    ``forward.channels_last``: image batches go in channels-last (oneDNN picks its convolutions by
    the input's layout, and which is faster depends on the model: :func:`measure` tries both)."""
    def forward(params, x, sink=None, train: bool = True):
        module.train(train)
        cl, n = forward.channels_last and x.dim() == 5, x.shape[0]

        def client(i):   # a chunk of one (the engine's default here) takes views: their backward copies nothing
            own = {k: v.view(v.shape[1:]) if n == 1 else v[i] for k, v in params.items()}
            return functional_call(module, own, (x[i].contiguous(memory_format=torch.channels_last) if cl else x[i],))
        return client(0).unsqueeze(0) if n == 1 else torch.stack([client(i) for i in range(n)])
    forward.per_client = True
    forward.channels_last = False
    return forward


class ExecForward:
    """The forward an engine calls: the training and the evaluation path of the decision, as one
    callable (``train=`` selects). ``shared_kernel`` (evaluation on shared images) is offered only
    when evaluation runs batched on a forward that takes them."""

    def __init__(self, batched, per_client, train_mode: str = "batched", eval_mode: str = "batched") -> None:
        self.paths = {"batched": batched, "per_client": per_client}
        self.train_mode, self.eval_mode = train_mode, eval_mode

    def __call__(self, params, x, sink=None, train: bool = True):
        return self.paths[self.train_mode if train else self.eval_mode](params, x, sink=sink, train=train)

    def set_layout(self, channels_last: bool) -> None:
        """The per-client path's input layout (what :func:`measure` found faster)."""
        inner = getattr(self.paths["per_client"], "__wrapped__", self.paths["per_client"])
        inner.channels_last = channels_last

    @property
    def per_client(self) -> bool:          # a lone node needs no pairing on this path (optim.loss_and_grad)
        return self.train_mode == "per_client"

    @property
    def shared_kernel(self):
        return getattr(self.paths["batched"], "shared_kernel", None) if self.eval_mode == "batched" else None


@dataclass
class Decision:
    """What ``model.exec`` resolved to, for summary.json: the training and evaluation paths, how
    they were chosen (configured | measured | cached), the probe's median timings in ms per node
    (``train_ms``/``eval_ms``) and every timed call (``calls_ms``), the nodes probed, the margin
    per_client had to beat, and the seconds the measurement took."""

    train: str = "batched"
    eval: str = "batched"
    channels_last: bool = False    # per client: image batches in channels-last (measured)
    how: str = "configured"
    train_ms: dict = field(default_factory=dict)
    eval_ms: dict = field(default_factory=dict)
    calls_ms: dict = field(default_factory=dict)
    probe_nodes: int = 0
    margin: float = MARGIN
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def cache_file() -> Path:
    """``$VECGOSSIP_EXEC_CACHE``, else exec.json in ``$VECGOSSIP_CACHE`` or ``~/.cache/vecgossip``."""
    if os.environ.get("VECGOSSIP_EXEC_CACHE"):
        return Path(os.environ["VECGOSSIP_EXEC_CACHE"])
    return Path(os.environ.get("VECGOSSIP_CACHE") or Path.home() / ".cache" / "vecgossip") / "exec.json"


def cpu_extensions() -> list[str]:
    """The CPU's vector extensions (AVX*, AMX, FMA, SSE4; Linux's /proc/cpuinfo): what kernel choices,
    and so speed and float rounding, depend on."""
    flags = ""
    try:
        flags = Path("/proc/cpuinfo").read_text().split("flags", 2)[1].split("\n", 1)[0]
    except (OSError, IndexError):
        pass
    return sorted({f for f in flags.split() if f.startswith(("avx", "amx", "fma", "sse4"))})


def machine_key() -> str:
    return f"{platform.machine()}|{','.join(cpu_extensions())}|torch {torch.__version__}"


def cache_key(model: str, device: torch.device, batch: int, precision: str, norm: str | None,
              params: int = 0, input_shape: tuple = ()) -> str:
    """Where a decision is cached: what its timings depend on (see the module docstring)."""
    from vecgossip._version import __version__
    dev = f"{torch.cuda.get_device_name(device)}|torch {torch.__version__}" if device.type == "cuda" else machine_key()
    shape = "x".join(map(str, input_shape))
    return (f"vecgossip {__version__}|{model}|{params} params|input {shape}|norm {norm}|{device.type}|{dev}"
            f"|batch {batch}|{precision}")


def _load_cache() -> dict:
    try:
        return json.loads(cache_file().read_text())
    except (OSError, ValueError):
        return {}


def _store(key: str, decision: Decision) -> None:
    from vecgossip.core.files import write_json
    path = cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    cache = _load_cache()
    cache[key] = {k: v for k, v in decision.as_dict().items() if k not in ("how", "seconds")}
    write_json(cache, path)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device: torch.device) -> float:
    """ms of one call, the device idle before and done after."""
    _sync(device)
    t = time.perf_counter()
    fn()
    _sync(device)
    return 1e3 * (time.perf_counter() - t)


def measure(forward: ExecForward, layout, theta, x, y, evaluate: bool) -> Decision:
    """Time a training step (and, when ``evaluate``, an evaluation forward) of each path on the
    probe rows ``theta`` (M, P) with batches x (M, B, ...), y (M, B) (the batched path's chunk):
    one warm-up call of each path, then REPS calls of each in turn, the device synchronized
    around each; the median ms per node of each path is compared (``pick``)."""
    from vecgossip.core.optim import loss_and_grad
    start = time.perf_counter()
    probe, m, dev = theta.clone(), theta.shape[0], theta.device
    d = Decision(how="measured", probe_nodes=m)

    def step(mode):                                       # as the engine runs it: per client, one at a time
        forward.train_mode = mode
        if mode == "batched":
            return _timed(lambda: loss_and_grad(forward, layout, probe, x, y), dev) / m
        return _timed(lambda: [loss_and_grad(forward, layout, probe[i:i + 1], x[i:i + 1], y[i:i + 1])
                               for i in range(m)], dev) / m

    def infer(mode):
        forward.eval_mode = mode
        with torch.no_grad():
            return _timed(lambda: forward(layout.views(probe, buffers=True), x, train=False), dev) / m

    def path(fn, name):
        if name == "batched":
            return fn("batched")
        forward.set_layout(name == "per_client_channels_last")
        return fn("per_client")
    names = ("batched", "per_client_nchw", "per_client_channels_last")
    for kind, fn, out, wanted in (("train", step, d.train_ms, True), ("eval", infer, d.eval_ms, evaluate)):
        if not wanted:
            continue
        warm = {name: path(fn, name) for name in names}   # warm-up: kernels chosen, workspace allocated
        # a path DROP times slower than the fastest even in the warm-up is not timed again (its
        # warm-up is its record): the batched LSTM on a CPU, ~12x slower, took most of a minute
        timed = [name for name in names if warm[name] <= DROP * min(warm.values())]
        calls = {name: ([] if name in timed else [round(warm[name], 3)]) for name in names}
        for _ in range(REPS):                             # alternated: a slow moment hits every path
            for name in timed:
                calls[name].append(round(path(fn, name), 3))
        d.calls_ms[kind] = calls
        out.update({name: float(np.median(v)) for name, v in calls.items()})
    d.channels_last = d.train_ms["per_client_channels_last"] < d.train_ms["per_client_nchw"]
    d.train, d.eval = pick(d.train_ms), pick(d.eval_ms)
    forward.train_mode, forward.eval_mode = d.train, d.eval
    forward.set_layout(d.channels_last)
    d.seconds = round(time.perf_counter() - start, 3)
    return d


def pick(t: dict) -> str:
    """``per_client`` when its median (either layout) is faster than the batched one's by more than
    MARGIN; else ``batched`` (also when nothing was timed)."""
    best = min(t.get("per_client_nchw", float("inf")), t.get("per_client_channels_last", float("inf")))
    return "per_client" if t and best < (1 - MARGIN) * t["batched"] else "batched"


def decide(forward: ExecForward, mode: str, key: str, probe, has_batched_eval: bool) -> Decision:
    """Resolve ``model.exec`` (``mode``) for ``forward`` (set in place). ``probe()`` returns
    (layout, theta rows, x, y) of the first chunk when a measurement is needed; ``key`` indexes the
    cache. Evaluation is measured only where the model has no hand-written batched forward."""
    if mode in ("batched", "per_client"):
        forward.train_mode = mode
        forward.eval_mode = "batched" if has_batched_eval and mode == "per_client" else mode
        return Decision(train=forward.train_mode, eval=forward.eval_mode)
    cached = _load_cache().get(key)
    if cached is not None:
        d = Decision(**{**cached, "how": "cached"})
        forward.train_mode, forward.eval_mode = d.train, d.eval
        forward.set_layout(d.channels_last)
        return d
    d = measure(forward, *probe(), evaluate=not has_batched_eval)
    _store(key, d)
    return d


def train_chunk(configured, decision: Decision, default: int) -> int:
    """Nodes per training chunk: as configured (an int), else 1 on the per-client path and the
    model's measured budget (``default``) on the batched one."""
    if configured != "auto":
        return int(configured)
    return 1 if decision.train == "per_client" else default


def adopt(forward: ExecForward, recorded: dict | None) -> None:
    """A resumed run computes on the paths its checkpoint recorded."""
    if recorded and isinstance(forward, ExecForward):
        forward.train_mode, forward.eval_mode = recorded["train"], recorded["eval"]
        forward.set_layout(recorded.get("channels_last", False))


def restore(forward: ExecForward, recorded: dict | None) -> Decision:
    """The decision a checkpoint recorded, adopted by ``forward``; a checkpoint from before
    ``model.exec`` existed records none and ran the batched path (checkpoint.PREDATED)."""
    ran = recorded or Decision(how="checkpoint from before model.exec").as_dict()
    adopt(forward, ran)
    return Decision(**ran)
