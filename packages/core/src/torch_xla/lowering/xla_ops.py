"""XLA's builder operations, by XLA's own names, as JAX functions.

PyTorch/XLA's `torch_xla.core.xla_builder` builds computations op by op in XLA's
C++ `XlaBuilder` ("Add", "Reshape", "While", ...; the list and the semantics are
XLA's operation semantics). Here every computation is a JAX function, so each
operation is the `jax.lax` function with those semantics, applied to the arrays
(or tracers) it is given. `apply(name, operands, attrs)` runs one; a tuple is a
Python tuple of arrays, as XLA's tuples are values of their own.

Computations given to an operation (a reduction's combiner, a loop's body) arrive
as Python callables over arrays; `torch_xla.core.xla_builder` makes them from the
user's functions over `Op`s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from torch_xla.lowering import dtypes

# XLA's primitive type names <-> numpy dtypes.
TYPES: dict[str, np.dtype] = {
    "pred": np.dtype(np.bool_),
    "s8": np.dtype(np.int8), "s16": np.dtype(np.int16), "s32": np.dtype(np.int32),
    "s64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8), "u16": np.dtype(np.uint16), "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16), "bf16": np.dtype(jnp.bfloat16), "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "c64": np.dtype(np.complex64), "c128": np.dtype(np.complex128),
}
TYPE_NAMES: dict[np.dtype, str] = {dtype: name for name, dtype in TYPES.items()}


def dtype_of(type_name: str) -> np.dtype:
    """The numpy dtype of an XLA type name ('f32', 'bf16', 'pred', ...)."""
    try:
        return TYPES[str(type_name)]
    except KeyError:
        raise ValueError(f"unknown XLA element type {type_name!r}; expected one of "
                         f"{', '.join(TYPES)}") from None


def type_name(dtype: Any) -> str:
    """XLA's name of a numpy/jax dtype."""
    try:
        return TYPE_NAMES[np.dtype(dtype)]
    except KeyError:
        raise ValueError(f"dtype {dtype} has no XLA element type") from None


def shape_of(value: Any) -> Any:
    """XLA's shape of a value: {'type', 'sizes'} for an array, a list of shapes for a tuple."""
    if isinstance(value, tuple):
        return [shape_of(v) for v in value]
    return {"type": type_name(value.dtype), "sizes": tuple(int(d) for d in value.shape)}


def spec_of(shape: Any) -> Any:
    """The `jax.ShapeDtypeStruct` (a tuple of them for a tuple shape) of an XLA shape."""
    if isinstance(shape, (list, tuple)):
        return tuple(spec_of(s) for s in shape)
    return jax.ShapeDtypeStruct(tuple(shape["sizes"]), dtype_of(shape["type"]))


def _broadcast_scalars(a, b):
    # XlaBuilder broadcasts a rank-0 operand of a binary op to the other's shape.
    if np.ndim(a) == 0 and np.ndim(b) > 0:
        return lax.broadcast(a, np.shape(b)), b
    if np.ndim(b) == 0 and np.ndim(a) > 0:
        return a, lax.broadcast(b, np.shape(a))
    return a, b


def _binary(fn: Callable) -> Callable:
    return lambda a, b: fn(*_broadcast_scalars(a, b))


def _not(x):
    return lax.bitwise_not(x)


def _shift_right(a, b):
    a, b = _broadcast_scalars(a, b)
    if jnp.issubdtype(a.dtype, jnp.unsignedinteger):
        return lax.shift_right_logical(a, b)
    return lax.shift_right_arithmetic(a, b)


def _padding(padding: Any, rank: int) -> Any:
    # XLA's builder takes 'valid'/'same' or explicit (low, high) pairs per spatial dim.
    if isinstance(padding, str):
        name = padding.upper()
        if name not in ("VALID", "SAME"):
            raise ValueError(f"padding must be 'valid', 'same' or (low, high) pairs, "
                             f"got {padding!r}")
        return name
    pairs = [tuple(int(v) for v in p) for p in padding]
    if len(pairs) != rank:
        raise ValueError(f"padding has {len(pairs)} (low, high) pairs for {rank} spatial "
                         "dimensions")
    return pairs


def _conv(lhs, rhs, window_strides, padding="valid", lhs_dilation=None, rhs_dilation=None,
          dimension_numbers=None, feature_group_count=1, batch_group_count=1,
          precision_config=None):
    spatial = len(window_strides)
    return lax.conv_general_dilated(
        lhs, rhs, tuple(window_strides), _padding(padding, spatial),
        lhs_dilation=tuple(lhs_dilation) if lhs_dilation else None,
        rhs_dilation=tuple(rhs_dilation) if rhs_dilation else None,
        dimension_numbers=dimension_numbers, feature_group_count=feature_group_count,
        batch_group_count=batch_group_count, precision=precision_config)


def _conv_dimensions(a: dict) -> lax.ConvDimensionNumbers:
    return lax.ConvDimensionNumbers(
        lhs_spec=(a.pop("input_batch_dimension"), a.pop("input_feature_dimension"),
                  *a.pop("input_spatial_dimensions")),
        rhs_spec=(a.pop("kernel_output_feature_dimension"),
                  a.pop("kernel_input_feature_dimension"), *a.pop("kernel_spatial_dimensions")),
        out_spec=(a.pop("output_batch_dimension"), a.pop("output_feature_dimension"),
                  *a.pop("output_spatial_dimensions")))


def _conv_general(lhs, rhs, **attrs):
    numbers = _conv_dimensions(attrs)
    return _conv(lhs, rhs, dimension_numbers=numbers, **attrs)


def _max_pool(x, kernel_size, stride, batch_dimension, feature_dimension, spatial_dimensions,
              padding="valid"):
    window = [1] * x.ndim
    strides = [1] * x.ndim
    for dim, size, step in zip(spatial_dimensions, kernel_size, stride, strict=True):
        window[dim], strides[dim] = size, step
    if not isinstance(padding, str):
        full = [(0, 0)] * x.ndim
        for dim, pair in zip(spatial_dimensions, padding, strict=True):
            full[dim] = tuple(pair)
        padding = full
    init = jnp.array(-jnp.inf if jnp.issubdtype(x.dtype, jnp.floating)
                     else jnp.iinfo(x.dtype).min, x.dtype)
    return lax.reduce_window(x, init, lax.max, tuple(window), tuple(strides),
                             padding.upper() if isinstance(padding, str) else padding)


def _reduce(x, init, computation, dimensions):
    return lax.reduce(x, init, computation, tuple(dimensions))


def _reduce_window(x, init, computation, window_dimensions, window_strides, padding="valid"):
    pad = padding.upper() if isinstance(padding, str) else [tuple(p) for p in padding]
    return lax.reduce_window(x, init, computation, tuple(window_dimensions),
                             tuple(window_strides), pad)


def _conditional(pred, true_operand, false_operand, true_computation, false_computation):
    return lax.cond(pred, lambda ops: true_computation(ops[0]),
                    lambda ops: false_computation(ops[1]), (true_operand, false_operand))


def _while(init, condition_computation, body_computation):
    return lax.while_loop(condition_computation, body_computation, init)


def _map(*operands, computation, dimensions, static_operands=()):
    fn = lambda *xs: computation(*xs, *static_operands)  # noqa: E731
    for _ in range(operands[0].ndim):
        fn = jax.vmap(fn)
    return fn(*operands)


def _sort(*operands, comparator=None, dimension=None, is_stable=None):
    if comparator is not None:
        raise ValueError("Sort: a custom comparator is not supported (JAX sorts by its "
                         "operands in ascending order); pass comparator=None")
    dim = -1 if dimension is None else dimension
    out = lax.sort(operands, dimension=dim, is_stable=bool(is_stable), num_keys=1)
    return out[0] if len(out) == 1 else tuple(out)


def _constant(value):
    if isinstance(value, torch.Tensor):
        host = value.detach().cpu()
        wide = host.float() if host.dtype == torch.bfloat16 else host
        return jnp.asarray(wide.numpy(), dtypes.to_jax(host.dtype))
    return jnp.asarray(value)


def _iota(shape, iota_dimension):
    return lax.broadcasted_iota(dtype_of(shape["type"]), tuple(shape["sizes"]), iota_dimension)


def _reshape(x, sizes, dimensions=None, inferred_dimension=None):
    return lax.reshape(x, tuple(sizes), tuple(dimensions) if dimensions is not None else None)


def _slice(x, start_indices, limit_indices, strides=None):
    return lax.slice(x, tuple(start_indices), tuple(limit_indices),
                     tuple(strides) if strides is not None else None)


def _triangular_solve(a, b, left_side=None, lower=None, unit_diagonal=None, transpose_a=None):
    return lax.linalg.triangular_solve(a, b, left_side=bool(left_side), lower=bool(lower),
                                       unit_diagonal=bool(unit_diagonal),
                                       transpose_a=bool(transpose_a))


def dot_dimension_numbers(numbers: Any) -> tuple:
    """XLA's DotGeneral dimension numbers, `((lhs_contracting, rhs_contracting),
    (lhs_batch, rhs_batch))` with an empty batch pair allowed as `()`, as jax's nested
    tuples of ints; a clear error for anything else."""
    try:
        contracting, batch = numbers
        batch = batch if len(batch) else ((), ())
        (lc, rc), (lb, rb) = contracting, batch
        return ((tuple(map(int, lc)), tuple(map(int, rc))),
                (tuple(map(int, lb)), tuple(map(int, rb))))
    except (TypeError, ValueError):
        raise ValueError(
            f"dot_general: dimension numbers {numbers!r} are not ((lhs_contracting, "
            "rhs_contracting), (lhs_batch, rhs_batch)) with lists of dimensions, e.g. "
            "(([1], [0]), ()) for a matrix product") from None


def _wrapped(dims: tuple, ndim: int, side: str) -> tuple:
    for d in dims:
        if not -ndim <= d < ndim:
            raise ValueError(f"dot_general: dimension {d} of the {side} operand is out of range "
                             f"for its {ndim} dims")
    return tuple(d % ndim for d in dims)


def dot_general(lhs, rhs, dimension_numbers, precision_config=None,
                preferred_element_type=None):
    """XLA's DotGeneral; `precision_config` names jax's precision ('default', 'high',
    'highest'). Negative dimensions count from the end of their operand."""
    (lc, rc), (lb, rb) = dot_dimension_numbers(dimension_numbers)
    numbers = ((_wrapped(lc, lhs.ndim, "lhs"), _wrapped(rc, rhs.ndim, "rhs")),
               (_wrapped(lb, lhs.ndim, "lhs"), _wrapped(rb, rhs.ndim, "rhs")))
    return lax.dot_general(lhs, rhs, numbers,
                           precision=precision_config,
                           preferred_element_type=preferred_element_type)


_UNARY: dict[str, Callable] = {
    "Neg": lax.neg, "Not": _not, "Abs": lax.abs, "Sign": lax.sign,
    "Acos": lax.acos, "Asin": lax.asin, "Atan": lax.atan, "Ceil": lax.ceil, "Cos": lax.cos,
    "Cosh": lax.cosh, "Erf": lax.erf, "Erfc": lax.erfc, "ErfInv": lax.erf_inv, "Exp": lax.exp,
    "Expm1": lax.expm1, "Floor": lax.floor, "Log": lax.log, "Log1p": lax.log1p,
    "Sqrt": lax.sqrt, "Rsqrt": lax.rsqrt, "Real": lax.real, "Imag": lax.imag,
    "Clz": lax.clz, "Conj": lax.conj, "Sin": lax.sin, "Sinh": lax.sinh, "Tan": lax.tan,
    "Tanh": lax.tanh,
}
_BINARY: dict[str, Callable] = {
    "Add": lax.add, "Sub": lax.sub, "Mul": lax.mul, "Div": lax.div, "Pow": lax.pow,
    "Rem": lax.rem, "And": lax.bitwise_and, "Or": lax.bitwise_or, "Xor": lax.bitwise_xor,
    "Eq": lax.eq, "Ne": lax.ne, "Le": lax.le, "Lt": lax.lt, "Ge": lax.ge, "Gt": lax.gt,
    "ShiftLeft": lax.shift_left, "Atan2": lax.atan2, "Max": lax.max, "Min": lax.min,
}

# name -> fn(*operands, **attrs)
OPS: dict[str, Callable] = {
    **{name: fn for name, fn in _UNARY.items()},
    **{name: _binary(fn) for name, fn in _BINARY.items()},
    "ShiftRight": _shift_right,
    "Dot": lambda a, b: lax.dot(a, b),
    "DotGeneral": dot_general,
    "Reshape": _reshape,
    "Broadcast": lambda x, sizes: lax.broadcast(x, tuple(sizes)),
    "BroadcastInDim": lambda x, sizes, dimensions: lax.broadcast_in_dim(
        x, tuple(sizes), tuple(dimensions)),
    "Slice": _slice,
    "SliceInDim": lambda x, start_index, limit_index, dimno, stride=1: lax.slice_in_dim(
        x, start_index, limit_index, stride, dimno),
    "DynamicSlice": lambda x, start_indices, slice_sizes: lax.dynamic_slice(
        x, tuple(start_indices), tuple(slice_sizes)),
    "DynamicUpdateSlice": lambda x, update, start_indices: lax.dynamic_update_slice(
        x, update, tuple(start_indices)),
    "Conv": lambda lhs, rhs, **a: _conv(lhs, rhs, **a),
    "ConvWithGeneralPadding": lambda lhs, rhs, **a: _conv(lhs, rhs, **a),
    "ConvWithGeneralDimensions": _conv_general,
    "ConvGeneral": _conv_general,
    "ConvGeneralDilated": _conv_general,
    "Convert": lambda x, to_type: lax.convert_element_type(x, dtype_of(to_type)),
    "BitcastConvert": lambda x, to_type: lax.bitcast_convert_type(x, dtype_of(to_type)),
    "Pad": lambda x, value, config: lax.pad(x, value, [tuple(c) for c in config]),
    "MaxPool": _max_pool,
    "Reduce": _reduce,
    "ReduceAll": lambda x, init, computation: _reduce(x, init, computation, range(x.ndim)),
    "ReduceWindow": _reduce_window,
    "Select": lambda pred, on_true, on_false: lax.select(pred, on_true, on_false),
    "Transpose": lambda x, permutation: lax.transpose(x, tuple(permutation)),
    "TriangularSolve": _triangular_solve,
    "Clamp": lambda x, low, high: lax.clamp(low, x, high),
    "GetTupleElement": lambda x, index: x[index],
    "Conditional": _conditional,
    "While": _while,
    "GetDimensionSize": lambda x, dimension: jnp.asarray(x.shape[dimension], jnp.int32),
    "Rev": lambda x, dimensions: lax.rev(x, tuple(dimensions)),
    "Tuple": lambda *xs: tuple(xs),
    "ConcatInDim": lambda *xs, dimension: lax.concatenate(xs, dimension),
    "Call": lambda *xs, computation: computation(*xs),
    "Sort": _sort,
    "Map": _map,
    "Constant": _constant,
    "Iota": _iota,
}


def apply(name: str, operands: Sequence[Any], attrs: dict) -> Any:
    """Run XLA operation `name` on `operands` (arrays, tuples of them) with `attrs`."""
    fn = OPS.get(name)
    if fn is None:
        raise ValueError(f"unknown XLA builder operation {name!r}; known: "
                         f"{', '.join(sorted(OPS))}")
    return fn(*operands, **{k: v for k, v in attrs.items() if v is not None})
