"""The engine's own rules: ops that need the engine itself (device data, the host, other
devices, in-place updates that ATen's schema hides) instead of a lowering.

Each registers into `dispatch.SPECIAL`; importing `torch_xla.lazy` loads this module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import torch

from torch_xla import _metrics, lowering
from torch_xla.lazy import (
    dispatch,
    fallback,
    functional,
    graph,
    ir,
    jax_call,
    layout,
    nodes,
    transfer,
)
from torch_xla.lazy.dispatch import special
from torch_xla.lazy.tensor import XLATensor, device_index, device_mismatch_error, uninitialized
from torch_xla.lowering.ops import losses

aten = torch.ops.aten


def _device_index(device: Any) -> int | None:
    device = torch.device(device)
    return None if device.type != "xla" else device_index(device)


@special(aten._to_copy.default)
def _to_copy(func, args, kwargs):
    (t,) = args
    dtype = kwargs.get("dtype") or t.dtype
    device = kwargs.get("device")
    if device is not None and torch.device(device).type == "cpu":
        return graph.to_cpu(t).to(dtype)
    target = t._node.device if device is None else _device_index(device)
    if target != t._node.device:
        graph.materialize([t])
        moved = transfer.client().to_device(t._node.array, target)
        t = XLATensor(nodes.data(moved, t.dtype, target))
    return nodes.convert(t, t.shape, dtype)


@special(aten.copy.default)
def _copy(func, args, kwargs):
    return copy_value(args[0], args[1])


def copy_value(dst: XLATensor, src: torch.Tensor) -> XLATensor:
    """`src` broadcast and cast to `dst`'s shape, dtype and device."""
    return XLATensor(*copied(dst, src))


def copied(dst: XLATensor, src: torch.Tensor) -> nodes.Value:
    """The value `copy_value` holds, without making a tensor (`dst.copy_(src)` sets it)."""
    device = dst._node.device
    if type(src) is not XLATensor:
        if torch._is_functional_tensor(src):
            src = nodes.as_xla(src, device)
        else:
            return nodes.host_data(src.to(dst.dtype).expand(dst.shape).contiguous(), device), 0
    if src._node.device != device:
        src = _to_copy(aten._to_copy.default, (src,), {"device": dst.device})
    return nodes.converted(src.value, dst.shape, dst.dtype)


@special(aten.native_batch_norm.default)
def _native_batch_norm(func, args, kwargs):
    """ATen's schema hides that training batch norm updates the running stats in place."""
    x, weight, bias, running_mean, running_var, training, momentum, eps = args
    if not training or running_mean is None:
        return dispatch.record_lowered(func, args, kwargs)
    out, mean, rstd, new_mean, new_var = aten._native_batch_norm_legit_functional.default(
        x, weight, bias, running_mean, running_var, training, momentum, eps
    )
    running_mean._set(*new_mean.value)
    running_var._set(*new_var.value)
    return out, mean, rstd


_NLL_OPS = (aten.nll_loss_forward.default, aten.nll_loss2d_forward.default,
            aten.nll_loss_backward.default, aten.nll_loss2d_backward.default)


@special(*_NLL_OPS)
def _nll_loss(func, args, kwargs):
    """nll_loss with a floating target: PyTorch/XLA's lowering reads the class indices as
    integers (CPU PyTorch refuses; programs written for PyTorch/XLA pass float targets, as
    `nn.CrossEntropyLoss()(out, torch.zeros(n))`), so the target is truncated to int64."""
    target_at = 2 if func in _NLL_OPS[2:] else 1
    target = args[target_at]
    if target.dtype.is_floating_point:
        args = (*args[:target_at], target.to(torch.int64), *args[target_at + 1:])
    return dispatch.record(func, lowering.lookup(func), args, kwargs)


@special(aten.uniform.default, aten.random.to, getattr(aten.random, "from"))
def _checked_random_bounds(func, args, kwargs):
    """`uniform_(a, b)` and `random_(from, to)` refuse bounds as CPU torch does (`from`
    >= `to`, a bound the dtype cannot hold): the CPU's kernel checks them on an empty
    tensor of the same dtype, which costs no sampling, and raises its own error. Meta
    kernels, which the engine records with, check nothing."""
    probe = torch.empty(0, dtype=args[0].dtype)
    bounds = {k: v for k, v in kwargs.items() if k != "generator"}
    sample = probe.uniform_ if func is aten.uniform.default else probe.random_
    sample(*args[1:], **bounds)
    return dispatch.record(func, lowering.lookup(func), tuple(args), kwargs)


@special(aten._embedding_bag_backward.default)
def _embedding_bag_backward(func, args, kwargs):
    """XLA tensors are dense: `embedding_bag(..., sparse=True)` gets the dense gradient,
    as in PyTorch/XLA, recorded as the dense backward (the sparse one's meta kernel sizes
    a `padding_idx` with `nonzero`, which would send it to the CPU)."""
    args = list(args)
    if len(args) > 9:
        args[9] = False
    else:
        kwargs = {**kwargs, "sparse": False}
    return dispatch.record(func, lowering.lookup(func), tuple(args), kwargs)


class EmptyReductionError(fallback.XlaIndexError):
    """A reduction without identity over an empty dim, raised when the op is recorded
    (before, the lowering failed at the sync)."""


_NUMEL_0 = "Expected reduction dim to be specified for input.numel() == 0."
_NAME_A_DIM = _NUMEL_0 + " Specify the reduction dim with the 'dim' argument."


@dataclasses.dataclass(frozen=True)
class _Reduction:
    """What CPU torch says of a reduction without identity over an empty dim."""

    name: str  # the op as the messages name it
    # (class, message) reducing every dim of an empty tensor; None: the op takes one dim
    every_dim: tuple[type[Exception], str] | None = None
    dims_as_given: bool = False  # the message names a negative dim unwrapped


_EMPTY_REDUCTIONS = {
    aten.max.dim: _Reduction("max()"),
    aten.min.dim: _Reduction("min()"),
    aten.max.default: _Reduction("max()", (RuntimeError, f"max(): {_NAME_A_DIM}")),
    aten.min.default: _Reduction("min()", (RuntimeError, f"min(): {_NAME_A_DIM}")),
    aten.amax.default: _Reduction("amax()", (RuntimeError, f"amax(): {_NAME_A_DIM}"), True),
    aten.amin.default: _Reduction("amin()", (RuntimeError, f"amin(): {_NAME_A_DIM}"), True),
    aten.argmax.default: _Reduction("argmax()", (EmptyReductionError, f"argmax(): {_NUMEL_0}")),
    aten.argmin.default: _Reduction("argmin()", (EmptyReductionError, f"argmin(): {_NUMEL_0}")),
    aten.aminmax.default: _Reduction("aminmax", (RuntimeError, (
        "aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
        "identity."))),
    aten.kthvalue.default: _Reduction("kthvalue()"),
    aten.median.dim: _Reduction("median()"),
    aten.nanmedian.dim: _Reduction("median()"),
    aten.mode.default: _Reduction("mode()"),
}


def _argument(func, args: tuple, kwargs: dict, name: str) -> Any:
    """Argument `name` as the engine receives it: positional, by keyword, or left at its
    schema default (None where the schema has no such argument)."""
    for i, arg in enumerate(func._schema.arguments):
        if arg.name == name:
            if i < len(args) and not arg.kwarg_only:
                return args[i]
            return kwargs.get(name, arg.default_value if arg.has_default_value() else None)
    return None


def _check_reduced_dims(func, reduction: _Reduction, t: XLATensor, args, kwargs) -> None:
    """Raise CPU torch's error if `func` reduces an empty dim of `t` (which has one)."""
    dims = _argument(func, args, kwargs, "dim")
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):  # every dim
        if reduction.every_dim is not None:
            error, message = reduction.every_dim
            raise error(message)
        return
    for dim in [dims] if isinstance(dims, int) else dims:
        if not -t.dim() <= dim < t.dim():
            return  # the op's own check names the dim out of range
        if t.shape[dim] == 0:
            shown = dim if reduction.dims_as_given else dim % t.dim()
            raise EmptyReductionError(
                f"{reduction.name}: Expected reduction dim {shown} to have non-zero size.")


def _reduction_rule(record: dispatch.Rule, reduction: _Reduction) -> dispatch.Rule:
    def reduce(func, args, kwargs):
        """A reduction's meta kernel accepts an empty reduced dim that the CPU refuses
        (`torch.max(x, 1)` of a (2, 0) tensor): refused here, as the op is recorded. A
        tensor with no empty dim pays one test."""
        if 0 in args[0].shape:
            _check_reduced_dims(func, reduction, args[0], args, kwargs)
        return record(func, args, kwargs)

    return reduce


for _op, _reduction in _EMPTY_REDUCTIONS.items():
    special(_op)(_reduction_rule(dispatch.recorder(_op), _reduction))


def _index_rule(record: dispatch.Rule) -> dispatch.Rule:
    def index(func, args, kwargs):
        """Index tensors on the CPU, which torch allows for indexing on any device
        (`x[torch.randperm(n)]`, `x[cpu_mask] = 0`): copied to the indexed tensor's
        device, a boolean mask as the positions of its True elements, found on the host
        (so the result's shape is known without running the graph)."""
        t, indices = args[0], args[1]
        for i in indices:  # a loop, not all(): no generator object on every index op
            if i is not None and type(i) is not XLATensor:
                break
        else:
            return record(func, args, kwargs)
        device = t._node.device
        moved: list = []
        for i in indices:
            if i is None or type(i) is XLATensor or i.device.type != "cpu":
                moved.append(i)
            elif i.dtype in (torch.bool, torch.uint8):
                moved += [nodes.from_host(p, device) for p in i.bool().nonzero(as_tuple=True)]
            else:
                moved.append(nodes.from_host(i, device))
        return record(func, (t, moved, *args[2:]), kwargs)

    return index


for _op in (aten.index.Tensor, aten._unsafe_index.Tensor, aten.index_put.default,
            aten._unsafe_index_put.default, aten._index_put_impl.default):
    special(_op)(_index_rule(dispatch.recorder(_op)))


@special(aten._ctc_loss.default, aten._ctc_loss.Tensor)
def _ctc_loss(func, args, kwargs):
    """CTC with its lengths fed as arrays: torch's schema passes them as int lists, which
    as constants would make every batch of new lengths a new program. The program is
    keyed by the shapes only, log_alpha's width (2 * the longest target + 1, the CPU's)
    among them; given as tensors, the lengths are read once for that width."""
    return functional.decomposed(_ctc_forward, args, kwargs)


@special(aten._ctc_loss_backward.default, aten._ctc_loss_backward.Tensor)
def _ctc_loss_backward(func, args, kwargs):
    return functional.decomposed(_ctc_backward, args, kwargs)


def _lengths(lengths: Sequence[int] | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if isinstance(lengths, torch.Tensor):
        return lengths.to(like.device, torch.int64)
    return torch.tensor(list(lengths), dtype=torch.int64).to(like.device)


def _ctc_forward(log_probs, targets, input_lengths, target_lengths, blank=0,
                 zero_infinity=False):
    # torch's own checks, and the outputs' shapes, from its meta kernel
    meta = [torch.empty(t.shape, dtype=t.dtype, device="meta") for t in (log_probs, targets)]
    given = [x.tolist() if isinstance(x, torch.Tensor) else x
             for x in (input_lengths, target_lengths)]
    _, log_alpha = aten._ctc_loss.default(*meta, *given, blank, zero_infinity)
    return jax_call.call(
        losses.ctc_loss_forward,
        (log_probs, targets, _lengths(input_lengths, log_probs),
         _lengths(target_lengths, log_probs)),
        {"width": log_alpha.shape[2], "blank": blank}, name="ctc_loss")


def _ctc_backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood,
                  log_alpha, blank, zero_infinity=False):
    return jax_call.call(
        losses.ctc_loss_backward,
        (grad, log_probs, targets, _lengths(input_lengths, log_probs),
         _lengths(target_lengths, log_probs), neg_log_likelihood, log_alpha),
        {"blank": blank, "zero_infinity": zero_infinity}, name="ctc_loss_backward")


@special(aten._assert_tensor_metadata.default)
def _assert_tensor_metadata(func, args, kwargs):
    """The check `torch.export` puts before a `.to(dtype)`: sizes and dtype, from the
    record alone. Strides and the device are not checked: an exported program traced on
    the CPU names the CPU's, and the export interpreter runs it on the XLA device."""
    t, size, _stride, dtype = (*args, None, None, None)[:4]
    size, dtype = kwargs.get("size", size), kwargs.get("dtype", dtype)
    if size is not None and list(size) != list(t.shape):
        raise RuntimeError(f"Tensor sizes mismatch! Expected: {list(size)}, Got: "
                           f"{list(t.shape)}")
    if dtype is not None and dtype != t.dtype:
        raise RuntimeError(f"Tensor dtype mismatch! Expected: {dtype}, Got: {t.dtype}")


@special(aten.resize.default)
def _resize(func, args, kwargs):
    t, size = args[0], tuple(args[1])
    if size == tuple(t.shape):
        return XLATensor(*t.value)
    return fallback.run_cpu(func, args, kwargs)


_LOCAL_SCALAR = _metrics.counter("aten::_local_scalar_dense")


@special(aten._local_scalar_dense.default)
def _local_scalar_dense(func, args, kwargs):
    """`.item()`, `bool(t)`: PyTorch/XLA counts the host read as a CPU fallback."""
    _LOCAL_SCALAR.value += 1
    return graph.to_cpu(args[0]).item()


@special(aten.empty.memory_format, aten.empty_strided.default)
def _empty(func, args, kwargs):
    dtype = kwargs.get("dtype") or torch.get_default_dtype()
    return uninitialized(nodes.full(tuple(args[0]), dtype, 0,
                                    nodes.target_device(kwargs.get("device"))))


@special(aten.empty_like.default, aten.new_empty.default, aten.new_empty_strided.default)
def _empty_like(func, args, kwargs):
    t = args[0]
    shape = tuple(args[1]) if len(args) > 1 else tuple(t.shape)
    return nodes.full(shape, kwargs.get("dtype") or t.dtype, 0, t._node.device)


_FILLS = {aten.ones_like.default: 1, aten.zeros_like.default: 0}


@special(aten.ones_like.default, aten.zeros_like.default, aten.full_like.default)
def _filled_like(func, args, kwargs):
    """A 0-dim fill of a tensor whose value is on the device (autograd's root gradient,
    `ones_like(loss)`, after a `torch.compile`d forward) is the cached device scalar, not
    a node: the compiled backward then finds its input ready, instead of running a program
    of its own to compute it (0.17 ms of a small model's training call). Anything else,
    a pending loss of lazy mode included, is recorded, so its constant folds as before."""
    t = args[0]
    device = kwargs.get("device")
    if (t._node.rule is not None or t.dim()  # pending first: lazy mode's usual case
            or (device is not None and _device_index(device) != t._node.device)):
        return dispatch.record_lowered(func, args, kwargs)
    value = _FILLS[func] if func in _FILLS else args[1]
    return nodes.device_scalar(value, kwargs.get("dtype") or t.dtype, t._node.device)


@special(aten.detach.default, aten.alias.default, aten.clone.default)
def _same_value(func, args, kwargs):
    return XLATensor(*args[0].value)


@special(aten.detach_copy.default, aten.alias_copy.default)
def _alias_view(func, args, kwargs):
    """The engine tensor of a view that is all of its base (`x.t().detach()`): the same
    value and the same layout."""
    found = layout.of_view(func, args, kwargs)
    return XLATensor(*args[0].value, *(found[0] if found else ()))


# (input layout, as_strided arguments) -> index of each requested element in the input.
_GATHERS: dict[tuple, Any] = {}


def _gathered(x, *, key):
    return x.reshape(-1)[_GATHERS[key]]


def _scattered(x, src, *, key):
    index = _GATHERS[key].reshape(-1)
    return x.reshape(-1).at[index].set(src.reshape(-1).astype(x.dtype)).reshape(x.shape)


@special(aten.as_strided_copy.default, aten.as_strided_scatter.default)
def _as_strided(func, args, kwargs):
    """`as_strided` indexes storage. The lowering indexes its input's value as if that
    were the storage, which holds for a tensor with a fresh tensor's layout (after the
    CPU's bounds checks); for a view (`x[5:15].as_strided(...)`) the requested locations
    are mapped to the view's elements first (`layout.storage_gather`), and a location
    the view does not cover is refused instead of read from the wrong element."""
    x = args[0]
    scatter = func is aten.as_strided_scatter.default
    size, stride, *rest = args[2:] if scatter else args[1:]
    offset = rest[0] if rest else kwargs.get("storage_offset")
    size, stride = tuple(size), tuple(stride)
    if layout.is_plain(x):
        layout.check_as_strided(x, size, stride, offset)
        return dispatch.record_lowered(func, args, kwargs)
    key = (scatter, tuple(x.shape), x.stride(), x.storage_offset(), size, stride, offset)
    if key not in _GATHERS:
        _GATHERS[key] = layout.storage_gather(x, size, stride, offset, scatter)
    if scatter:
        src = args[1]
        if type(src) is not XLATensor:
            return dispatch.record_lowered(func, args, kwargs)  # says what is wrong
        return nodes.custom(_scattered, "xla::as_strided_scatter", [x, src], {"key": key},
                            [(tuple(x.shape), x.dtype)])[0]
    return nodes.custom(_gathered, "xla::as_strided", [x], {"key": key}, [(size, x.dtype)],
                        layout.of_view(func, args, kwargs) or [None])[0]


@special(aten.lift_fresh.default)
def _lift_fresh(func, args, kwargs):
    """`torch.tensor(data, device=xla)` ends here: the new tensor becomes a user tensor.

    The schema makes the result an alias of the argument (a fresh tensor nobody else
    holds), so the engine tensor itself is wrapped: `CreateXlaTensor` counts one.

    While dispatch modes trace (dynamo's fake tensors, AOTAutograd's tracer), torch made
    the argument on the device outside them, and the modes leave a tensor type they do
    not know to us. Lifted on the CPU and moved under them instead, the data is a
    constant of the traced graph, as for `torch.tensor(data, device='cuda')`."""
    if torch._C._len_torch_dispatch_stack():
        host = graph.to_cpu(args[0])
        return aten._to_copy.default(func(host), device=torch.device("xla", args[0]._node.device))
    return functional.lift_fresh(args[0])


@special(aten.lift_fresh_copy.default)
def _lift_fresh_copy(func, args, kwargs):
    return functional.lift_fresh(XLATensor(*args[0].value))


def _barrier(*arrays):
    return jax.lax.optimization_barrier(arrays)


def optimization_barrier_(tensors: Sequence[torch.Tensor]) -> None:
    """`xm.optimization_barrier_`: the tensors take their values through one XLA
    optimization barrier, so the compiler moves no computation across it."""
    inner = [functional.unwrap(t) for t in tensors]
    if not inner:
        return
    device = inner[0]._node.device
    for t in inner:
        if t._node.device != device:
            raise device_mismatch_error(device, t._node.device)
    avals = [t._node.avals[t._index] for t in inner]
    node = ir.Node("xla::optimization_barrier", _barrier,
                   (tuple(ir.Slot(i) for i in range(len(inner))), ()),
                   [t.value for t in inner], tuple(avals), device,
                   hash(("xla::optimization_barrier", tuple(avals))))
    for i, t in enumerate(inner):
        t._set(node, i)
