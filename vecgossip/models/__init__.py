"""Model registry: a plain ``nn.Module`` factory plus a batched all-node forward.

``factory(in_shape, num_classes)`` builds one plain module for inputs (C, H, W) (defaults: MNIST's
(1, 28, 28) and 10 classes). ``impl="explicit"`` uses the hand-batched forward (grouped conv +
baddbmm); ``impl="vmap"`` runs the plain module under ``torch.func.vmap(functional_call)``. Both
take per-node parameter views ``{name: (N, ...)}`` and inputs (N, B, C, H, W) and return logits
(N, B, classes); ``train=False`` asks for the evaluation forward (only BatchNorm differs). A new model registers its module; the vmap path batches it without any
hand-written code, the explicit path is the measured fast path where one exists. The explicit ones
also take a ``sink`` that receives their linear weight gradients as factors (models/layers.py);
the vmap one ignores it, so its gradients all come from autograd. A model without a fast path
(ResNet-18, VGG-11) runs the vmap path whatever ``impl`` says.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.func import functional_call, vmap

from vecgossip.models import char_lstm, char_transformer, cnn, lenet, mlp, resnet, vgg

Tensor = torch.Tensor
Forward = Callable[..., Tensor]  # (params, x, sink=None) -> logits


@dataclass(frozen=True)
class ModelDef:
    factory: Callable[..., nn.Module]   # (in_shape=(C, H, W), num_classes) -> one plain module
    explicit: Forward | None = None     # the hand-batched fast path; None: the generic vmap path only
    # CPU working-set budget for "auto" chunking, measured with benchmarks/train_step.py:
    # (images per chunk, max nodes per chunk). Conv nets want small chunks (cache), MLPs large ones.
    cpu_chunk: tuple[int, int] = (256, 10)
    # GPU: images per chunk (activation memory): 65536 LeNet/CNN images; ResNet-18 keeps ~1-3 MB of
    # activations per 32x32 image for the backward, so 8192 images (64 clients at B = 128) ~ 10-25 GB
    gpu_images: int = 1 << 16
    # evaluation: at most this many images per forward (CPU, GPU); None: a chunk of nodes takes its
    # whole test set at once (the MLP). ResNet-18 holds ~2.6 MB of activations per image; LeNet and
    # the CNN ~0.15 MB: 2048 images keep one evaluation forward near 300 MB on the CPU (their whole
    # 10,000-image test set at once peaked at +1.6 GB: issue 39's estimate-vs-peak study).
    eval_images: tuple[int, int] | None = None
    norms: tuple[str, ...] = ()         # the factory's ``norm=`` choices, the first its default
    # round engine: the largest SGD step lr / (1 - momentum) measured to train without diverging in
    # the first rounds (results/lr_cpu/); above it a run starts with a one-line warning
    # (config.rules.cautions). None: not measured, no warning.
    stable_step: float | None = None
    inputs: str = "image"               # image: (C, H, W) floats | text: (T,) character indices
    width: int | None = None            # the factory's ``width=`` default (model.width); None: no such option


MODELS: dict[str, ModelDef] = {
    "lenet": ModelDef(lenet.LeNetCaffe, lenet.batched_forward, cpu_chunk=(256, 10), eval_images=(2048, 1 << 16),
                      stable_step=0.3),   # results/lr_cpu/: step 1.0 diverged on 3-5 of 8 clients
    "mlp": ModelDef(mlp.MLP, mlp.batched_forward, cpu_chunk=(1 << 16, 4096)),
    "cnn": ModelDef(cnn.CNN, cnn.batched_forward, cpu_chunk=(256, 10), eval_images=(2048, 1 << 16)),   # B=128: 2 clients, B=32: 8
    # paper 2's models (CIFAR variants, BatchNorm or GroupNorm): vmap only
    "resnet18": ModelDef(resnet.ResNet18, None, cpu_chunk=(256, 8), gpu_images=8192,   # B=128: 2 clients
                         eval_images=(512, 16384), norms=resnet.NORMS),
    "vgg11": ModelDef(vgg.VGG11, None, cpu_chunk=(256, 8), gpu_images=8192, eval_images=(512, 16384),
                      norms=resnet.NORMS),
    # text (data=shakespeare): next character from an 80-character window. The LSTM's hand-batched
    # forward is the "explicit" path; model.exec=auto measures it against oneDNN/cuDNN node by node
    "char_lstm": ModelDef(char_lstm.of, char_lstm.explicit_forward, cpu_chunk=(256, 4),
                          eval_images=(4096, 1 << 16), inputs="text", width=256),
    "char_transformer": ModelDef(char_transformer.of, None, cpu_chunk=(256, 4), eval_images=(4096, 1 << 16),
                                 inputs="text", width=64),
}
NORMS = resnet.NORMS
IMPLS = ("explicit", "vmap")


BUILT_IN = tuple(MODELS)


def register_model(name: str, factory: Callable[..., nn.Module], cpu_chunk: tuple[int, int] = (256, 10)) -> None:
    """Make ``model.name=<name>`` a model of one's own: ``factory(in_shape, num_classes)`` returns
    one plain ``nn.Module`` taking a batch (B, *in_shape) to (B, num_classes) logits (any
    architecture torch.func can vmap: parameters and buffers are stacked per node, BatchNorm's
    running statistics included). It runs on the generic vmap path. ``cpu_chunk``: (images per
    training chunk, most nodes per chunk) for engine.train_chunk=auto. ValueError if the name is
    taken by a built-in or the factory does not build a module with parameters."""
    if not isinstance(name, str) or not name.isidentifier() or name in BUILT_IN:
        raise ValueError(f"register_model: {name!r} must be an identifier and not a built-in model")
    if not callable(factory):
        raise ValueError("register_model: factory must be callable as factory(in_shape, num_classes)")
    with torch.device("meta"):
        try:
            module = factory((1, 28, 28), 10)
        except Exception as err:   # noqa: BLE001 - the user's factory
            raise ValueError(f"register_model: factory((1, 28, 28), 10) failed: {type(err).__name__}: {err}") from None
    if not isinstance(module, nn.Module) or not any(True for _ in module.parameters()):
        raise ValueError("register_model: factory(in_shape, num_classes) must return an nn.Module with parameters")
    MODELS[name] = ModelDef(factory, None, cpu_chunk=tuple(cpu_chunk))


def get_model(name: str) -> ModelDef:
    if name not in MODELS:
        raise ValueError(f"model.name={name!r} is unknown; allowed: {', '.join(MODELS)}")
    return MODELS[name]


def build(name: str, in_shape: tuple[int, ...] = (1, 28, 28), num_classes: int = 10,
          norm: str | None = None, width: int | None = None) -> nn.Module:
    """One plain module of model ``name``; ``norm`` picks its normalisation where it has a choice
    (``model.norm``; None: the model's default; ignored by a model without normalisation);
    ``width`` the width of a model that takes one (``model.width``; None: its default)."""
    model = get_model(name)
    if width is not None and model.width is not None:
        return model.factory(in_shape, num_classes, width=width)
    if not model.norms or norm is None:
        return model.factory(in_shape, num_classes)
    if norm not in model.norms:
        raise ValueError(f"model.norm={norm!r} is not available; allowed: {', '.join(model.norms)}")
    return model.factory(in_shape, num_classes, norm=norm)


def vmap_forward(module: nn.Module) -> Forward:
    """Generic batched forward for any module: vmap of functional_call over the node axis.

    ``params`` may hold the nodes' buffers too (BatchNorm running statistics, stack.Layout):
    ``train=True`` runs the module in training mode (batch statistics; the running ones, which
    must then be contiguous (N, C) tensors, are updated in place), ``train=False`` in evaluation
    mode (the running statistics normalise)."""
    def one(params: dict[str, Tensor], x: Tensor) -> Tensor:
        return functional_call(module, params, (x,))
    batched = vmap(one)

    def forward(params: dict[str, Tensor], x: Tensor, sink=None, train: bool = True) -> Tensor:
        module.train(train)
        return batched(params, x)
    return forward


PRECISIONS = ("tf32", "fp32", "bf16", "fp64")   # tf32 and fp32: the same forward (runtime/precision.py)


def state_dtype(precision: str) -> torch.dtype:
    """The dtype of the stacked state and of the batches: float64 under ``precision=fp64`` (checks
    and loop twins to ~1e-12, any CPU), else float32 (bf16 keeps fp32 master weights)."""
    return torch.float64 if precision == "fp64" else torch.float32


def autocast_forward(forward: Forward) -> Forward:
    """``precision=bf16``: the forward (and so its backward) under ``torch.autocast`` with
    bfloat16 on the inputs' device: convolutions and matrix products in bf16, what autocast keeps
    in fp32 (softmax/cross-entropy inputs, BatchNorm statistics) in fp32. The parameters passed
    in stay the fp32 master weights, so their gradients, momentum and update are fp32; the
    logits come back as fp32."""
    def forward_bf16(params: dict[str, Tensor], x: Tensor, sink=None, train: bool = True) -> Tensor:
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            out = forward(params, x, sink=sink, train=train)
        return out.float()
    forward_bf16.__wrapped__ = forward
    forward_bf16.per_client = getattr(forward, "per_client", False)
    return forward_bf16


def check_precision(name: str, impl: str, precision: str) -> None:
    """ValueError unless ``precision`` is known and runs on the path ``impl`` picks for ``name``:
    tf32 and fp32 run anywhere (they differ only in a GPU's matmul settings); bf16 needs the vmap path (the hand-written backward passes of models/layers.py run in the
    inputs' dtype, not under autocast); fp64 runs on either path."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is unknown; allowed: {', '.join(PRECISIONS)}")
    if precision == "bf16" and impl == "explicit" and get_model(name).explicit is not None:
        raise ValueError(f"precision={precision} runs on the vmap path: add model.impl=vmap "
                         f"(model={name} has a hand-batched fp32 fast path)")


def make_forward(name: str, impl: str = "explicit", in_shape: tuple[int, ...] = (1, 28, 28),
                 num_classes: int = 10, norm: str | None = None, precision: str = "fp32",
                 width: int | None = None) -> Forward:
    if impl not in IMPLS:
        raise ValueError(f"model.impl={impl!r} is unknown; allowed: {', '.join(IMPLS)}")
    check_precision(name, impl, precision)
    model = get_model(name)
    if impl == "explicit" and model.explicit is not None:
        return model.explicit
    forward = vmap_forward(build(name, in_shape, num_classes, norm, width).to("meta"))
    return autocast_forward(forward) if precision == "bf16" else forward
