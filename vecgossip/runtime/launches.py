"""What a step costs a GPU in launches and host syncs, counted on any machine (DESIGN.md, "The GPU
step and the clock"; issue 46).

:func:`count` runs a callable under ``torch.profiler`` and a ``TorchFunctionMode`` and returns:

* ``ops``: the outermost aten ops (and this package's custom ops) that launch a kernel: an op
  counts once however many ops it calls, if any op under it does work (views, ``empty`` and
  metadata queries launch nothing). ``kernels``: the innermost such ops, a closer estimate of the
  kernel launches (a composite op such as ``cross_entropy`` is two).
* ``uploads``: host data copied to the device without blocking (``non_blocking``): no sync, but
  not what a CUDA graph can replay (the graph would read the host buffer of its capture);
* ``sequence`` (with ``shapes=True``): each launching op with its input shapes, in order: two
  steps with the same sequence have static shapes (what a CUDA graph needs);
* ``syncs``: the calls that make the host wait for the device: a Python value read from a device
  tensor (``item``, ``bool``, ``int``, ``float``, ``tolist``, ``numpy``, ``cpu``, ``torch.equal``,
  ...), an op whose output size depends on the data (``nonzero``, ``bincount``, ``unique``,
  ``masked_select``, boolean-mask indexing, ``repeat_interleave`` without ``output_size``), and a
  blocking host-to-device copy: ``.to(device)`` / ``copy_`` of host data without
  ``non_blocking``, a factory that copies host data to ``device=``, or host data (of more than one
  element) used in an op on device tensors. Each sync is named by the line of this package that
  made it (``sites``).

"Host data" is what the host made: ``torch.from_numpy``, ``torch.tensor`` / ``as_tensor`` /
factories without ``device=``, and ops on host data alone. Run under
:func:`vecgossip.core.device.force_gpu_paths`, the CPU computes what a GPU would, so the counts are
the GPU path's. Limits: a ``.to(device)`` of a device tensor is taken as device-to-device (on a
CPU the two look alike); CUDA-only kernels run as a stand-in registered as one op."""
from __future__ import annotations

import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

Tensor = torch.Tensor
PACKAGE = str(Path(__file__).resolve().parents[1])

NO_KERNEL = {   # aten ops that launch nothing: views, allocation without a fill, metadata
    "aten::view", "aten::reshape", "aten::_reshape_alias", "aten::slice", "aten::select", "aten::as_strided",
    "aten::expand", "aten::expand_as", "aten::t", "aten::transpose", "aten::unsqueeze", "aten::squeeze",
    "aten::permute", "aten::detach", "aten::detach_", "aten::alias", "aten::_unsafe_view", "aten::unfold",
    "aten::split", "aten::split_with_sizes", "aten::chunk", "aten::unbind", "aten::narrow", "aten::flatten",
    "aten::unflatten", "aten::view_as", "aten::empty", "aten::empty_like", "aten::empty_strided",
    "aten::resize_", "aten::set_", "aten::lift_fresh", "aten::to", "aten::contiguous", "aten::requires_grad_",
    "aten::result_type", "aten::size", "aten::stride", "aten::numel", "aten::dim", "aten::is_floating_point",
    "aten::_has_compatible_shallow_copy_type", "aten::crow_indices", "aten::col_indices", "aten::values",
    "aten::indices", "aten::_sparse_csr_tensor_unsafe", "aten::sparse_csr_tensor", "aten::_nested_tensor_from_mask",
    "aten::diagonal", "aten::movedim", "aten::swapaxes", "aten::mT", "aten::real", "aten::conj", "aten::resolve_conj",
    "aten::resolve_neg", "aten::_local_scalar_dense", "aten::item", "aten::is_nonzero", "aten::lift",
    "aten::_to_dense", "aten::type_as", "aten::broadcast_tensors", "aten::_shape_as_tensor", "aten::ravel",
    "aten::matrix_H", "aten::record_stream", "aten::pin_memory", "aten::_pin_memory", "aten::is_pinned",
}
NAMESPACES = ("aten::", "vecgossip::")
DATA_DEPENDENT = {"nonzero", "argwhere", "bincount", "unique", "unique_consecutive", "masked_select",
                  "nonzero_static_unsupported", "_unique", "_unique2", "histogram"}
PY_VALUE = {"item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__", "__complex__",
            "equal", "allclose", "is_nonzero", "__array__"}


@dataclass
class Counts:
    """One step's cost: launching ops (outermost, and innermost as ``kernels``), host syncs and
    where they came from."""

    ops: int = 0
    kernels: int = 0
    syncs: int = 0
    sites: Counter = field(default_factory=Counter)      # "path:line function: what" -> syncs
    op_names: Counter = field(default_factory=Counter)   # outermost launching op -> count
    uploads: Counter = field(default_factory=Counter)    # "path:line function" -> non-blocking uploads
    sequence: list = field(default_factory=list)         # (op, input shapes) of each launching op

    def as_dict(self) -> dict:
        return {"ops": self.ops, "kernels": self.kernels, "syncs": self.syncs, "sites": dict(self.sites),
                "op_names": dict(self.op_names), "uploads": dict(self.uploads)}


def _tensors(obj, out: list) -> list:
    if isinstance(obj, Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _tensors(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _tensors(o, out)
    return out


def _host(t: Tensor) -> bool:
    return getattr(t, "_vg_host", False)


def _mark(obj) -> None:
    for t in _tensors(obj, []):
        try:
            t._vg_host = True
        except (AttributeError, RuntimeError):      # a tensor that takes no attributes
            pass


def _site() -> str:
    """The innermost line of this package (not this module) on the stack."""
    for frame in reversed(traceback.extract_stack()[:-3]):
        if frame.filename.startswith(PACKAGE) and not frame.filename.endswith("launches.py"):
            rel = Path(frame.filename).relative_to(Path(PACKAGE).parent)
            return f"{rel}:{frame.lineno} {frame.name}"
    return "(outside the package)"


class SyncCounter(TorchFunctionMode):
    """The host syncs of the torch calls made under it (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: Counter = Counter()
        self.uploads: Counter = Counter()

    def hit(self, what: str) -> None:
        self.sites[f"{_site()}: {what}"] += 1

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        ins = _tensors(args, []) + _tensors(kwargs, [])
        dev_in = [t for t in ins if not _host(t)]
        host_in = [t for t in ins if _host(t)]
        self.classify(name, args, kwargs, dev_in, host_in)
        out = func(*args, **kwargs)
        if name in ("to", "cuda") and self.moves(args, kwargs) and isinstance(out, Tensor) and _host(out):
            out._vg_host = False                                   # on the device now (a CPU's .to is itself)
        device_given = kwargs.get("device") is not None
        if name in ("cpu", "numpy") or (host_in and not dev_in and name not in ("to", "cuda")):
            _mark(out)                                             # host data stays host data
        elif not ins and not device_given and isinstance(out, Tensor) and name not in ("__get__",):
            _mark(out)                                             # a factory without device=: the host's
        return out

    @staticmethod
    def moves(args, kwargs) -> bool:
        """Whether a ``.to`` / ``.cuda`` call names a device (not only a dtype)."""
        if kwargs.get("device") is not None:
            return True
        for a in args[1:]:
            if isinstance(a, (str, torch.device)):
                return True
            if isinstance(a, Tensor):
                return True
        return False

    def classify(self, name: str, args, kwargs, dev_in: list, host_in: list) -> None:
        if name in PY_VALUE and dev_in:
            self.hit(name)
            return
        if name in DATA_DEPENDENT and dev_in:
            self.hit(name)
            return
        if name == "where" and len(args) == 1 and dev_in:
            self.hit("where(cond)")
            return
        if name == "repeat_interleave" and dev_in and isinstance(args[1] if len(args) > 1 else kwargs.get("repeats"),
                                                                 Tensor) and kwargs.get("output_size") is None:
            self.hit("repeat_interleave without output_size")
            return
        if name in ("__getitem__", "__setitem__", "index_put_", "index_put") and dev_in and len(args) > 1:
            idx = _tensors(args[1], [])                            # the index (not the value set)
            if any(t.dtype == torch.bool for t in idx):
                self.hit(f"{name} with a boolean mask")
                return
        blocking = not kwargs.get("non_blocking", False) and not (len(args) > 2 and args[2] is True and name == "copy_")
        if name in ("to", "cuda") and host_in and args and _host(args[0]) and self.moves(args, kwargs):
            if blocking:
                self.hit("blocking host-to-device copy (.to)")
            else:
                self.uploads[_site()] += 1
            return
        if name == "copy_" and len(args) > 1 and isinstance(args[1], Tensor) and _host(args[1]) \
                and not _host(args[0]) and blocking:
            self.hit("blocking host-to-device copy (copy_)")
            return
        if kwargs.get("device") is not None and host_in and name not in ("to", "cuda"):
            self.hit(f"host data copied to device= ({name})")
            return
        if dev_in and any(t.numel() > 1 or t.dim() > 0 for t in host_in) and name not in ("to", "cuda", "copy_"):
            self.hit(f"host data in a device op ({name})")


def _leaf(ev) -> bool:
    """An op with no op under it, or one of this package's ops (one kernel on a GPU, whatever its
    CPU stand-in runs)."""
    return ev.name.startswith("vecgossip::") or not any(c.name.startswith(NAMESPACES) for c in ev.cpu_children)


def _inside_package_op(ev) -> bool:
    p = ev.cpu_parent
    while p is not None:
        if p.name.startswith("vecgossip::"):
            return True
        p = p.cpu_parent
    return False


def _launches(ev, memo: dict) -> bool:
    key = id(ev)
    if key not in memo:
        kids = [] if ev.name.startswith("vecgossip::") else [c for c in ev.cpu_children if c.name.startswith(NAMESPACES)]
        if kids:
            memo[key] = any(_launches(c, memo) for c in kids)
        else:
            memo[key] = ev.name not in NO_KERNEL
    return memo[key]


def _outermost(ev) -> bool:
    p = ev.cpu_parent
    while p is not None:
        if p.name.startswith(NAMESPACES):
            return False
        p = p.cpu_parent
    return True


def count(fn, *args, shapes: bool = False, **kwargs) -> tuple[object, Counts]:
    """Run ``fn(*args, **kwargs)`` once, counting; returns (its result, :class:`Counts`);
    ``shapes``: also record the launching ops' input shapes (``Counts.sequence``)."""
    from torch.profiler import ProfilerActivity, profile

    from_numpy = torch.from_numpy

    def marked_from_numpy(a: np.ndarray) -> Tensor:
        t = from_numpy(a)
        t._vg_host = True
        return t

    mode = SyncCounter()
    torch.from_numpy = marked_from_numpy
    try:
        with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes) as prof, mode:
            out = fn(*args, **kwargs)
    finally:
        torch.from_numpy = from_numpy
    c = Counts(sites=mode.sites, syncs=sum(mode.sites.values()), uploads=mode.uploads)
    memo: dict = {}
    for ev in prof.events():
        if not ev.name.startswith(NAMESPACES) or not _launches(ev, memo):
            continue
        if _outermost(ev):
            c.ops += 1
            c.op_names[ev.name] += 1
            if shapes:
                c.sequence.append((ev.name, str(ev.input_shapes)))
        if _leaf(ev) and not _inside_package_op(ev):
            c.kernels += 1
    return out, c
