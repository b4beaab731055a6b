"""Stacked node state: all N node models in one flat (N, P) buffer with per-layer views.

The node axis is first everywhere. A :class:`Layout` records where each parameter of a plain
``nn.Module`` lives inside the flat vector, so that the optimiser, mixing and variance correction
are single tensor ops over (N, P) while the model's forward sees ordinary per-layer tensors.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

Tensor = torch.Tensor
NORM_MODULES = (nn.GroupNorm, nn.LayerNorm, nn.modules.batchnorm._NormBase)


@dataclass(frozen=True)
class ParamSpec:
    """One parameter tensor of the model: ``name`` (e.g. ``conv1.weight``), shape and flat slice."""

    name: str
    shape: tuple[int, ...]
    start: int
    stop: int
    norm: bool = False        # a normalisation layer's parameter (GroupNorm/BatchNorm scale or shift)

    @property
    def layer(self) -> str:
        """The layer the tensor belongs to: its module (``conv1`` of ``conv1.weight``); an
        recurrent module's tensors per layer and direction (``lstm.ih_l0`` of ``lstm.weight_ih_l0``
        and ``lstm.bias_ih_l0``: each of its matrices is a layer of its own, as Algorithm 3 reads)."""
        head, _, last = self.name.rpartition(".")
        kind, sep, rest = last.partition("_")
        if sep and kind in ("weight", "bias"):
            return f"{head}.{rest}" if head else rest
        return head or last

    @property
    def is_bias(self) -> bool:
        """A bias (``bias``, or a recurrent module's ``bias_ih_l0`` / ``bias_hh_l0``)."""
        last = self.name.rpartition(".")[2]
        return last == "bias" or last.startswith("bias_") or self.name.endswith("bias")

    @property
    def numel(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Layer:
    """One tensor of a model inside the flat per-node vector (:meth:`Layout.tensors`): its
    ``name`` (``conv1.weight``), its ``layer`` (``conv1``), its ``kind`` (``weight``, ``bias``,
    ``norm`` (a normalisation layer's scale or shift) or ``buffer`` (BatchNorm running
    statistics: per node, never trained)), its ``shape`` and its columns ``start:stop`` of a row
    of the state (``theta[:, layer.slice]`` is every node's copy of it)."""

    name: str
    layer: str
    kind: str
    shape: tuple[int, ...]
    start: int
    stop: int

    @property
    def slice(self) -> slice:
        return slice(self.start, self.stop)


RUNNING_STATS = ("running_mean", "running_var")   # BatchNorm buffers kept per node (num_batches_tracked
                                                 # is not: with a fixed momentum it changes nothing)


@dataclass(frozen=True)
class Layout:
    """Where every parameter of one model sits inside the flat per-node vector.

    ``specs``: the parameters, columns [0, params_size). ``buffers``: BatchNorm running statistics
    (``running_mean``, ``running_var``), after them, columns [params_size, size): per node, they
    travel with the model (sent, averaged, checkpointed as its state dict's entries would), but the
    optimiser never touches them and they take no gradient; a training forward updates them
    (optim.loss_and_grad), an evaluation forward reads them."""

    specs: tuple[ParamSpec, ...]
    buffers: tuple[ParamSpec, ...] = ()

    @staticmethod
    def of(module: nn.Module) -> "Layout":
        specs, offset = [], 0
        norms = {n for n, m in module.named_modules() if isinstance(m, NORM_MODULES)}
        for name, p in module.named_parameters():
            specs.append(ParamSpec(name, tuple(p.shape), offset, offset + p.numel(), name.rsplit(".", 1)[0] in norms))
            offset += p.numel()
        bufs = []
        for name, b in module.named_buffers():
            if name.rsplit(".", 1)[-1] in RUNNING_STATS:
                bufs.append(ParamSpec(name, tuple(b.shape), offset, offset + b.numel(), True))
                offset += b.numel()
        return Layout(tuple(specs), tuple(bufs))

    @property
    def size(self) -> int:
        """Columns per node: parameters, then buffers."""
        return (self.buffers or self.specs)[-1].stop

    @property
    def params_size(self) -> int:
        return self.specs[-1].stop

    @property
    def layers(self) -> tuple[str, ...]:
        """Names of the layers with a weight matrix/kernel, in model order (conv1, conv2, ip1, ip2
        for LeNet): the layers of the per-layer statistics."""
        return tuple(s.layer for s in self.weights)

    @property
    def weights(self) -> tuple[ParamSpec, ...]:
        """The weight tensor of each conv/linear layer, in layer order (what Algorithm 3 rescales
        and the variance statistics read); a normalisation layer's 1-D scale is not one."""
        return tuple(s for s in self.specs if not s.is_bias and not s.norm)

    def tensors(self) -> tuple[Layer, ...]:
        """Every tensor of the model in column order: parameters, then running statistics."""
        kind = lambda s: "norm" if s.norm else ("bias" if s.is_bias else "weight")  # noqa: E731
        return (tuple(Layer(s.name, s.layer, kind(s), s.shape, s.start, s.stop) for s in self.specs)
                + tuple(Layer(s.name, s.layer, "buffer", s.shape, s.start, s.stop) for s in self.buffers))

    def columns(self, layers) -> Tensor:
        """The columns (a sorted index) of the tensors whose layer is in ``layers`` (names such as
        ``ip2``, or a layer's prefix such as ``layer4``), e.g. a classifier kept local."""
        wanted = tuple(layers)
        chosen = [t for t in self.tensors() if t.layer in wanted or t.layer.startswith(tuple(w + "." for w in wanted))]
        if not chosen:
            raise ValueError(f"no layer of the model is named {', '.join(wanted)}; its layers: "
                             f"{', '.join(dict.fromkeys(t.layer for t in self.tensors()))}")
        return torch.cat([torch.arange(t.start, t.stop) for t in chosen])

    def views(self, flat: Tensor, buffers: bool = False) -> dict[str, Tensor]:
        """Per-parameter views of a flat (N, P) tensor: ``{name: (N, *shape)}`` (no copy); with
        ``buffers``, the running statistics' views too (what an evaluation forward reads)."""
        n = flat.shape[0]
        return {s.name: flat[:, s.start:s.stop].view(n, *s.shape)
                for s in (self.specs + self.buffers if buffers else self.specs)}

    def buffer_copies(self, flat: Tensor) -> dict[str, Tensor]:
        """Each running statistic of (N, P) rows as its own contiguous (N, *shape) copy, for a
        training forward to update: vmap's batch_norm updates a batched running_mean in place only
        when it is contiguous (a strided view of ``flat`` is silently left unchanged; measured
        with torch 2.14). :meth:`store_buffers` writes them back."""
        n = flat.shape[0]
        return {s.name: flat[:, s.start:s.stop].reshape(n, *s.shape).clone(memory_format=torch.contiguous_format)
                for s in self.buffers}

    def store_buffers(self, flat: Tensor, copies: dict[str, Tensor]) -> None:
        for s in self.buffers:
            flat[:, s.start:s.stop] = copies[s.name].reshape(flat.shape[0], -1)


@dataclass
class NodeState:
    """Everything a node owns, stacked over nodes.

    theta: (N, P) parameters; momentum: (N, P) SGD velocity (survives averaging: paper section III-A);
    iters: (N,) int64 count of each node's own training steps (Caffe "inv" lr policy).
    """

    layout: Layout
    theta: Tensor
    momentum: Tensor
    iters: Tensor
    extra: dict[str, Tensor] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return self.theta.shape[0]

    def params(self) -> dict[str, Tensor]:
        return self.layout.views(self.theta)


def allocate_declared(state: NodeState, algorithm, d_max: int = 0) -> None:
    """The algorithm's declared per-node state (algorithms.PerNode) and per-edge state
    (algorithms.PerEdge: ``d_max`` slots per receiver) in ``state.extra``, rows as ``state``'s, in
    its dtype; kept if already there (a resumed or stacked state)."""
    for name, spec in algorithm.state(state.layout).items():
        if name in state.extra:
            continue
        edges = type(spec).__name__ == "PerEdge"
        shape = spec.size(state.layout, d_max) if edges else spec.size(state.layout)
        if edges and spec.init == "theta":
            raise ValueError(f"{algorithm.name()}: per-edge state {name!r} takes init zeros or ones")
        if spec.init == "theta":
            state.extra[name] = state.theta[:, :shape[0]].clone().reshape(state.n, *shape)
        elif spec.init == "zeros":
            state.extra[name] = state.theta.new_zeros(state.n, *shape)
        elif spec.init == "ones":
            state.extra[name] = state.theta.new_ones(state.n, *shape)
        else:
            raise ValueError(f"{algorithm.name()}: state {name!r} has init={spec.init!r}; allowed: zeros, ones, theta")


def fan_in(shape: tuple[int, ...]) -> int:
    """Caffe/PyTorch fan-in of a weight of shape (out, in, *kernel)."""
    return int(math.prod(shape[1:]))


def fan_out(shape: tuple[int, ...]) -> int:
    return int(shape[0] * math.prod(shape[2:]))


INIT_SCHEMES = ("caffe_xavier", "glorot", "torch")


def init_bounds(layout: Layout, scheme: str) -> dict[str, float]:
    """Uniform bound a per parameter (absent: zero-initialised). ``caffe_xavier``: weights
    a = sqrt(3/fan_in) (Caffe's default FAN_IN norm, variance 1/fan_in), biases 0; ``glorot``:
    weights a = sqrt(6/(fan_in+fan_out)) (paper 1 section II-C), biases 0; ``torch``: PyTorch's
    default for nn.Conv2d / nn.Linear (kaiming_uniform with a = sqrt(5)), weights and biases
    a = 1/sqrt(fan_in) (what paper 2's PyTorch code starts from)."""
    if scheme not in INIT_SCHEMES:
        raise ValueError(f"model.init={scheme!r} is unknown; allowed: {', '.join(INIT_SCHEMES)}")
    out, fans = {}, {s.layer: fan_in(s.shape) for s in layout.weights}
    for s in layout.specs:
        if s.layer not in fans:       # normalisation layers: constant init (init_theta)
            continue
        if scheme == "torch":
            out[s.name] = 1.0 / math.sqrt(fans[s.layer])
        elif s.is_bias:
            continue
        elif scheme == "caffe_xavier":
            out[s.name] = math.sqrt(3.0 / fan_in(s.shape))
        else:
            out[s.name] = math.sqrt(6.0 / (fan_in(s.shape) + fan_out(s.shape)))
    return out


def is_norm_scale(s: ParamSpec) -> bool:
    """A normalisation layer's entry that starts at 1: its per-channel scale (GroupNorm/BatchNorm
    ``weight``) or BatchNorm's ``running_var``."""
    return s.norm and s.name.rsplit(".", 1)[-1] in ("weight", "running_var")


INIT_BLOCK = 1 << 24   # random numbers drawn at a time when only some rows are kept


def init_theta(layout: Layout, n: int, scheme: str, generator: torch.Generator,
               shared: bool = False, device: torch.device | str = "cpu",
               rows: tuple[int, int] | None = None) -> Tensor:
    """(N, P) independently initialised models (U(-a, a) per :func:`init_bounds`, else 0).

    ``shared=True`` draws one model and copies it to every node (federated learning's shared
    initial model); the default draws every node independently, which is what causes the
    vanishing variance (paper section IV). ``rows=(lo, hi)``: only those nodes' rows (a shard,
    shard.py), the same numbers as rows lo..hi of the whole draw: every number is still drawn, in
    the same order (a generator has no skip-ahead), but in blocks, so memory stays at the shard's.
    """
    bounds = init_bounds(layout, scheme)
    lo, hi = (0, n) if rows is None else rows
    drawn = 1 if shared else n
    theta = torch.zeros(1 if shared else hi - lo, layout.size)
    for s in layout.specs + layout.buffers:
        if is_norm_scale(s):          # a normalisation layer's scale starts at 1 (its shift at 0),
            theta[:, s.start:s.stop] = 1.0     # its running variance at 1 (its running mean at 0)
        if s.name not in bounds:
            continue
        a = bounds[s.name]
        if shared or rows is None:
            theta[:, s.start:s.stop] = torch.rand(drawn, s.numel, generator=generator) * (2 * a) - a
            continue
        step = max(1, INIT_BLOCK // s.numel)     # torch.rand fills row-major: blocks of rows draw the same
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            block = torch.rand(r1 - r0, s.numel, generator=generator) * (2 * a) - a
            a0, a1 = max(r0, lo), min(r1, hi)
            if a0 < a1:
                theta[a0 - lo:a1 - lo, s.start:s.stop] = block[a0 - r0:a1 - r0]
    if shared:
        theta = theta.expand(hi - lo, -1).clone()
    return theta.to(device)


def new_state(layout: Layout, theta: Tensor) -> NodeState:
    n = theta.shape[0]
    return NodeState(layout, theta, torch.zeros_like(theta),
                     torch.zeros(n, dtype=torch.int64, device=theta.device))


def to_modules(state: NodeState, factory) -> list[nn.Module]:
    """Unstack into N plain modules (for tests and export); ``factory()`` builds one model."""
    mods = []
    for i in range(state.n):
        m = factory()
        load_flat(m, state.layout, state.theta[i])
        mods.append(m)
    return mods


def module_tensors(module: nn.Module, layout: Layout) -> list[Tensor]:
    """A plain module's parameters, then its running statistics, in ``layout``'s order (one per
    spec of ``layout.specs + layout.buffers``)."""
    named = dict(module.named_parameters()) | dict(module.named_buffers())
    return [named[s.name] for s in layout.specs + layout.buffers]


def load_flat(module: nn.Module, layout: Layout, flat: Tensor) -> None:
    """One node's row into a plain module: its parameters and running statistics."""
    with torch.no_grad():
        for s, t in zip(layout.specs + layout.buffers, module_tensors(module, layout)):
            t.copy_(flat[s.start:s.stop].view(s.shape))


def flatten(module: nn.Module) -> Tensor:
    """A plain module as one node's row (parameters, then running statistics: Layout.of's order)."""
    bufs = [b for n, b in module.named_buffers() if n.rsplit(".", 1)[-1] in RUNNING_STATS]
    return torch.cat([t.detach().reshape(-1) for t in [*module.parameters(), *bufs]])


