"""JAX functions inside PyTorch/XLA programs (`torch_xla.core.xla_builder`, PyTorch/XLA's `xb`).

`call_jax(jax_func, args, kwargs=None, name=None, override_hash=None)` calls a JAX
function on XLA tensors while the step is recorded: one node of the lazy graph
whose lowering is the JAX function itself, compiled into the step's program.

    import jax.numpy as jnp
    import torch_xla.core.xla_builder as xb

    def gelu_tanh(x, w):
        y = x @ w
        return 0.5 * y * (1 + jnp.tanh(0.79788456 * (y + 0.044715 * y**3)))

    out = xb.call_jax(gelu_tanh, (x, w))     # x, w: XLA tensors; out: an XLA tensor

- `args` is a tuple (and `kwargs` a dict) holding any pytree of tensors and other
  values; tensors arrive as jax arrays of their stored dtype, other leaves as
  themselves, baked into the computation (so hashable: a new value traces again).
- The function returns arrays in any pytree; they come back as XLA tensors in it.
- Each signature is traced once (`jax.eval_shape`); repeated calls record the kept
  trace, and equal computations share one compiled program.
- `name` labels the computation; `override_hash` replaces its fingerprint (by
  default the hash of its StableHLO) when the caller knows the identity of the
  computation better, and skips lowering it once to compute that hash.
- Not differentiable by itself: wrap it in a `torch.autograd.Function`, or use
  `torch_xla.experimental.assume_pure`, whose backward is JAX's `vjp`.

PyTorch/XLA's XLA-builder API is here too, for code written against it: `Op`
(an XLA operation, with XLA's operations as methods and operators), `Shape`, `Type`,
`create_computation(name, fn, shapes)`, `tensor_shape`, `get_computation_hlo`, and
`torch_xla.core.xla_op_registry.register`, which makes such a function a PyTorch op
on XLA tensors:

    def slice_and_add(a, b, dimno=0):
        sa = a.slice_in_dim(start_index=0, limit_index=1, dimno=dimno)
        sb = b.slice_in_dim(start_index=1, limit_index=2, dimno=dimno)
        return sa + sb

    SLICE_AND_ADD = xor.register('slice_and_add', slice_and_add)
    z = SLICE_AND_ADD(x, y, dimno=0)

PyTorch/XLA builds these with XLA's C++ `XlaBuilder`; here an `Op` wraps a JAX value
(the builder's operations are `jax.lax` functions with XLA's semantics,
`torch_xla.lowering.xla_ops`) and a computation is a JAX function, traced when it is
created. So a computation is made by `create_computation` (or passed as a Python
function to the operation that takes one: `reduce`, `while_loop`, `conditional`...);
building one by hand from `mkparam` and `Op.build` is not possible. Operations XLA
has but JAX cannot express are absent: `gather`/`scatter` (their slice sizes are
not in this API), `select_and_scatter`, `set_dimension_size`/`dynamic_reshape`
(dynamic shapes), and `Sort` with a comparator.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import jax
import torch
from jax._src.lib import xla_client

import torch_xla
from torch_xla.lazy import dtype_policy, dump, functional, jax_call, nodes
from torch_xla.lazy.tensor import XLATensor
from torch_xla.lowering import dtypes, xla_ops
from torch_xla.utils import utils as xu

# PyTorch/XLA's names: the traced computations, one per signature, and their count.
_JAX_TO_XLA_COMPUTATION_CACHE = jax_call.COMPUTATIONS


def _jax_to_xla_computation_cache_elements() -> int:
    return len(_JAX_TO_XLA_COMPUTATION_CACHE)


def call_jax(jax_func: Callable, args: tuple | list, kwargs: dict | None = None,
             name: str | None = None, override_hash: Any = None) -> Any:
    """Call `jax_func(*args, **kwargs)` on the XLA tensors in `args` and `kwargs`, recorded
    into the current step's graph; returns its arrays as XLA tensors (see the module)."""
    return jax_call.call(jax_func, args, kwargs, name, override_hash)


# --- PyTorch/XLA's XLA-builder API, on JAX ---------------------------------------------


class Type:
    """XLA's element types, by the names XLA prints them with."""

    F32 = "f32"
    F64 = "f64"
    BF16 = "bf16"
    F16 = "f16"
    U8 = "u8"
    S8 = "s8"
    U16 = "u16"
    S16 = "s16"
    U32 = "u32"
    S32 = "s32"
    U64 = "u64"
    S64 = "s64"
    C64 = "c64"
    C128 = "c128"
    PRED = "pred"


class Shape:
    """An XLA shape: `{'type': 'f32', 'sizes': (2, 3)}` for an array, a list of shapes
    for a tuple."""

    def __init__(self, shape: Any) -> None:
        self._shape = shape

    @classmethod
    def create(cls, dtype: str, sizes: Sequence[int], dynamic_dimensions=None) -> Shape:
        if dynamic_dimensions is not None and any(dynamic_dimensions):
            raise ValueError("dynamic dimensions are not supported: every XLA shape here is "
                             "static")
        return cls({"type": str(dtype), "sizes": tuple(int(d) for d in sizes)})

    @property
    def shape(self) -> Any:
        return self._shape

    def is_tuple(self) -> bool:
        return isinstance(self._shape, (list, tuple))

    def tuple_size(self) -> int:
        self._require_tuple()
        return len(self._shape)

    def tuple_shape(self, index: int) -> Any:
        self._require_tuple()
        return self._shape[index]

    def is_dynamic(self) -> bool:
        self._require_array()
        return False

    def as_scalar(self) -> Shape:
        return Shape.create(self.dtype, ())

    @property
    def rank(self) -> int:
        return len(self.sizes)

    @property
    def sizes(self) -> tuple:
        self._require_array()
        return self._shape["sizes"]

    @property
    def dynamic_dimensions(self) -> None:
        self._require_array()
        return None

    @property
    def dtype(self) -> str:
        self._require_array()
        return self._shape["type"]

    def _require_tuple(self) -> None:
        if not self.is_tuple():
            raise ValueError(f"{self!r} is an array shape, not a tuple shape")

    def _require_array(self) -> None:
        if self.is_tuple():
            raise ValueError(f"{self!r} is a tuple shape; take one of its elements")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shape) and other._shape == self._shape

    def __hash__(self) -> int:
        return hash(repr(self._shape))

    def __repr__(self) -> str:
        return f"Shape({self._shape!r})"


class Builder:
    """The computation an `Op` belongs to (PyTorch/XLA's `XlaBuilder`): its name, and
    while it is traced, its parameters."""

    def __init__(self, name: str, params: Sequence[Any] = ()) -> None:
        self.name = name
        self.params = tuple(params)

    def __repr__(self) -> str:
        return f"Builder({self.name!r})"


class Computation:
    """A computation made by `create_computation`: `fn` over the `Op`s of parameters of
    `shapes`, traced once to check it and find its result's shape. Calling it on JAX
    values (inside a traced function) runs it; `get_computation_hlo` prints it."""

    def __init__(self, name: str, fn: Callable, shapes: Sequence[Shape], kwargs: dict) -> None:
        self.name = name
        self.fn = fn
        self.shapes = tuple(s if isinstance(s, Shape) else Shape(s) for s in shapes)
        self.kwargs = dict(kwargs)
        self.specs = tuple(xla_ops.spec_of(s.shape) for s in self.shapes)
        self.result_shape = Shape(xla_ops.shape_of(jax.eval_shape(self, *self.specs)))

    def __call__(self, *values: Any) -> Any:
        builder = Builder(self.name, values)
        params = [mkparam(builder, i, shape) for i, shape in enumerate(self.shapes)]
        root = self.fn(*params, **self.kwargs)
        if isinstance(root, (tuple, list)):
            root = Op.tuple(root, builder=builder)
        if not isinstance(root, Op):
            raise TypeError(f"computation {self.name!r}: {jax_call.function_name(self.fn)} "
                            f"returned {type(root).__name__}; it must return an xb.Op (or a tuple "
                            "of them)")
        return root.op

    def hlo_text(self) -> str:
        def run(*values):
            return self(*values)

        run.__name__ = run.__qualname__ = self.name  # the HLO module's name
        return dump.hlo_text(jax.jit(run).lower(*self.specs))

    def __repr__(self) -> str:
        return f"Computation({self.name!r}, {list(self.shapes)} -> {self.result_shape})"


class Op:
    """An XLA operation's value while a computation is traced: `op` is a JAX array
    (a tracer), or a Python tuple of them for an XLA tuple. Methods and operators are
    XLA's operations (https://openxla.org/xla/operation_semantics); other operands
    are `Op`s of the same computation."""

    def __init__(self, op: Any, builder: Builder | None = None) -> None:
        self.op = op
        self._builder = builder

    def shape(self) -> Shape:
        return Shape(xla_ops.shape_of(self.op))

    def builder(self) -> Builder:
        if self._builder is None:
            self._builder = Builder("builder")
        return self._builder

    def _make(self, name: str, *operands: Op, **attrs: Any) -> Op:
        return mkop(name, (self.op, *(_value(o, name) for o in operands)),
                    builder=self._builder, **attrs)

    # arithmetic, logic and comparison: XLA's element-wise binary operations
    def __add__(self, rhs): return self._make("Add", rhs)  # noqa: E704
    def __sub__(self, rhs): return self._make("Sub", rhs)  # noqa: E704
    def __mul__(self, rhs): return self._make("Mul", rhs)  # noqa: E704
    def __matmul__(self, rhs): return self._make("Dot", rhs)  # noqa: E704
    def __truediv__(self, rhs): return self._make("Div", rhs)  # noqa: E704
    def __pow__(self, rhs): return self._make("Pow", rhs)  # noqa: E704
    def __mod__(self, rhs): return self._make("Rem", rhs)  # noqa: E704
    def __neg__(self): return self._make("Neg")  # noqa: E704
    def __invert__(self): return self._make("Not")  # noqa: E704
    def __and__(self, rhs): return self._make("And", rhs)  # noqa: E704
    def __or__(self, rhs): return self._make("Or", rhs)  # noqa: E704
    def __xor__(self, rhs): return self._make("Xor", rhs)  # noqa: E704
    def __eq__(self, rhs): return self._make("Eq", rhs)  # noqa: E704
    def __ne__(self, rhs): return self._make("Ne", rhs)  # noqa: E704
    def __le__(self, rhs): return self._make("Le", rhs)  # noqa: E704
    def __lt__(self, rhs): return self._make("Lt", rhs)  # noqa: E704
    def __ge__(self, rhs): return self._make("Ge", rhs)  # noqa: E704
    def __gt__(self, rhs): return self._make("Gt", rhs)  # noqa: E704
    def __lshift__(self, rhs): return self._make("ShiftLeft", rhs)  # noqa: E704
    def __rshift__(self, rhs): return self._make("ShiftRight", rhs)  # noqa: E704
    __not__ = __invert__
    __hash__ = object.__hash__  # == builds an operation, so hash by identity

    # shapes and data movement
    def reshape(self, sizes, dimensions=None, inferred_dimension=None) -> Op:
        return self._make("Reshape", sizes=sizes, dimensions=dimensions)

    def broadcast(self, sizes) -> Op:
        return self._make("Broadcast", sizes=sizes)

    def broadcast_in_dim(self, sizes, dimensions) -> Op:
        return self._make("BroadcastInDim", sizes=sizes, dimensions=dimensions)

    def slice(self, start_indices, limit_indices, strides=None) -> Op:
        return self._make("Slice", start_indices=start_indices, limit_indices=limit_indices,
                          strides=strides)

    def slice_in_dim(self, start_index, limit_index, dimno, stride=1) -> Op:
        return self._make("SliceInDim", start_index=start_index, limit_index=limit_index,
                          dimno=dimno, stride=stride)

    def dynamic_slice(self, start_indices, slice_sizes) -> Op:
        return self._make("DynamicSlice", start_indices=[_value(i) for i in start_indices],
                          slice_sizes=slice_sizes)

    def dynamic_update_slice(self, update, start_indices) -> Op:
        return self._make("DynamicUpdateSlice", update,
                          start_indices=[_value(i) for i in start_indices])

    def pad(self, value, config) -> Op:
        return self._make("Pad", value, config=config)

    def transpose(self, permutation) -> Op:
        return self._make("Transpose", permutation=permutation)

    def rev(self, dimensions) -> Op:
        return self._make("Rev", dimensions=dimensions)

    def get_tuple_element(self, index: int) -> Op:
        if not isinstance(self.op, tuple):
            raise ValueError(f"get_tuple_element({index}): the operand is an array of "
                             f"{self.shape().shape}, not a tuple")
        return self._make("GetTupleElement", index=index)

    def get_dimension_size(self, dimension: int) -> Op:
        return self._make("GetDimensionSize", dimension=dimension)

    def cast(self, to_type: str) -> Op:
        return self._make("Convert", to_type=to_type)

    def bitcast(self, to_type: str) -> Op:
        return self._make("BitcastConvert", to_type=to_type)

    def select(self, true_value, false_value) -> Op:
        return self._make("Select", true_value, false_value)

    def clamp(self, min_value, max_value) -> Op:
        return self._make("Clamp", min_value, max_value)

    # convolutions and windows
    def conv(self, kernel, window_strides, feature_group_count=1, batch_group_count=1,
             padding="valid", precision_config=None) -> Op:
        return self._make("Conv", kernel, window_strides=window_strides, padding=padding,
                          feature_group_count=feature_group_count,
                          batch_group_count=batch_group_count,
                          precision_config=precision_config)

    def conv_with_general_padding(self, kernel, window_strides, padding, feature_group_count=1,
                                  batch_group_count=1, precision_config=None) -> Op:
        return self._make("ConvWithGeneralPadding", kernel, window_strides=window_strides,
                          padding=padding, feature_group_count=feature_group_count,
                          batch_group_count=batch_group_count,
                          precision_config=precision_config)

    def conv_with_general_dimensions(self, kernel, window_strides, *dimensions, padding="valid",
                                     feature_group_count=1, batch_group_count=1,
                                     precision_config=None, **named) -> Op:
        return self._make("ConvWithGeneralDimensions", kernel, window_strides=window_strides,
                          padding=padding, feature_group_count=feature_group_count,
                          batch_group_count=batch_group_count,
                          precision_config=precision_config, **_dims(dimensions, named))

    def conv_general(self, kernel, window_strides, padding, *dimensions,
                     feature_group_count=1, batch_group_count=1, precision_config=None,
                     **named) -> Op:
        return self._make("ConvGeneral", kernel, window_strides=window_strides,
                          padding=padding, feature_group_count=feature_group_count,
                          batch_group_count=batch_group_count,
                          precision_config=precision_config, **_dims(dimensions, named))

    def conv_general_dilated(self, kernel, window_strides, padding, lhs_dilation, rhs_dilation,
                             *dimensions, feature_group_count=1, batch_group_count=1,
                             precision_config=None, **named) -> Op:
        return self._make("ConvGeneralDilated", kernel, window_strides=window_strides,
                          padding=padding, lhs_dilation=lhs_dilation,
                          rhs_dilation=rhs_dilation, feature_group_count=feature_group_count,
                          batch_group_count=batch_group_count,
                          precision_config=precision_config, **_dims(dimensions, named))

    def max_pool(self, kernel_size, stride, batch_dimension, feature_dimension,
                 spatial_dimensions, padding="valid") -> Op:
        return self._make("MaxPool", kernel_size=kernel_size, stride=stride,
                          batch_dimension=batch_dimension, feature_dimension=feature_dimension,
                          spatial_dimensions=spatial_dimensions, padding=padding)

    # reductions, loops and branches: their computations are functions over Ops
    def _scalar_computation(self, name: str, computation) -> Any:
        scalar = self.shape().as_scalar()
        return Op.make_computation(name, computation, (scalar, scalar))

    def reduce(self, init_value, computation, dimensions) -> Op:
        return self._make("Reduce", init_value, dimensions=dimensions,
                          computation=self._scalar_computation("Reduce", computation))

    def reduce_all(self, init_value, computation) -> Op:
        return self._make("ReduceAll", init_value,
                          computation=self._scalar_computation("ReduceAll", computation))

    def reduce_window(self, init_value, computation, window_dimensions, window_strides,
                      padding="valid") -> Op:
        return self._make("ReduceWindow", init_value, window_dimensions=window_dimensions,
                          window_strides=window_strides, padding=padding,
                          computation=self._scalar_computation("ReduceWindow", computation))

    def triangualr_solve(self, b, left_side=None, lower=None, unit_diagonal=None,
                         transpose_a=None) -> Op:
        # (sic) PyTorch/XLA's spelling; `triangular_solve` is the same operation
        return self._make("TriangularSolve", b, left_side=left_side, lower=lower,
                          unit_diagonal=unit_diagonal, transpose_a=transpose_a)

    triangular_solve = triangualr_solve

    def conditional(self, true_operand, false_operand, true_computation,
                    false_computation) -> Op:
        return self._make(
            "Conditional", true_operand, false_operand,
            true_computation=Op.make_computation("CondTrue", true_computation,
                                                 (true_operand,)),
            false_computation=Op.make_computation("CondFalse", false_computation,
                                                  (false_operand,)))

    def mkconditional(self, ops, true_fn, false_fn, **kwargs) -> Op:
        operands = Op.tuple(ops, builder=self._builder)
        return self.conditional(operands, operands, true_fn, false_fn)

    def while_loop(self, condition_computation, body_computation) -> Op:
        return self._make(
            "While",
            condition_computation=Op.make_computation("Condition", condition_computation,
                                                      (self,)),
            body_computation=Op.make_computation("Body", body_computation, (self,)))

    @classmethod
    def mkwhile(cls, ops, condition_fn, body_fn, **kwargs) -> Op:
        return Op.tuple(ops).while_loop(condition_fn, body_fn)

    @classmethod
    def wrap_function(cls, fn: Callable) -> Callable:
        """`fn` over a tuple's elements as a computation over the tuple (a list result
        becomes a tuple)."""

        def wrapper(*args, **kwargs):
            if len(args) == 1 and args[0].shape().is_tuple():
                args = [args[0].get_tuple_element(i) for i in range(len(args[0].op))]
            result = fn(*args, **kwargs)
            return Op.tuple(result) if isinstance(result, (tuple, list)) else result

        return wrapper

    @classmethod
    def make_computation(cls, name: str, computation, args_or_shapes, **kwargs) -> Any:
        """A computation from a Python function over the parameters of the shapes (or of
        the `Op`s) given; an already made computation is returned as it is."""
        if isinstance(computation, Computation) or not callable(computation):
            return computation
        shapes = [a if isinstance(a, Shape) else a.shape() for a in args_or_shapes]
        return create_computation(name, Op.wrap_function(computation), shapes, **kwargs)

    # element-wise functions
    def acos(self): return self._make("Acos")  # noqa: E704
    def asin(self): return self._make("Asin")  # noqa: E704
    def atan(self): return self._make("Atan")  # noqa: E704
    def ceil(self): return self._make("Ceil")  # noqa: E704
    def cos(self): return self._make("Cos")  # noqa: E704
    def cosh(self): return self._make("Cosh")  # noqa: E704
    def erf(self): return self._make("Erf")  # noqa: E704
    def erfc(self): return self._make("Erfc")  # noqa: E704
    def erfinf(self): return self._make("ErfInv")  # noqa: E704
    def exp(self): return self._make("Exp")  # noqa: E704
    def expm1(self): return self._make("Expm1")  # noqa: E704
    def floor(self): return self._make("Floor")  # noqa: E704
    def log(self): return self._make("Log")  # noqa: E704
    def log1p(self): return self._make("Log1p")  # noqa: E704
    def sqrt(self): return self._make("Sqrt")  # noqa: E704
    def real(self): return self._make("Real")  # noqa: E704
    def imag(self): return self._make("Imag")  # noqa: E704
    def clz(self): return self._make("Clz")  # noqa: E704
    def conj(self): return self._make("Conj")  # noqa: E704
    def rsqrt(self): return self._make("Rsqrt")  # noqa: E704
    def sin(self): return self._make("Sin")  # noqa: E704
    def sinh(self): return self._make("Sinh")  # noqa: E704
    def tan(self): return self._make("Tan")  # noqa: E704
    def tanh(self): return self._make("Tanh")  # noqa: E704
    def atan2(self, other): return self._make("Atan2", other)  # noqa: E704
    def max(self, other): return self._make("Max", other)  # noqa: E704
    def min(self, other): return self._make("Min", other)  # noqa: E704
    erfinv = erfinf

    def scalar_like(self, value) -> Op:
        shape = self.shape()
        return Op.scalar(self.builder(), value, dtype=shape.dtype).broadcast(shape.sizes)

    def zeros_like(self) -> Op:
        return self.scalar_like(0)

    def ones_like(self) -> Op:
        return self.scalar_like(1)

    # operations over several operands, and leaves
    @classmethod
    def tuple(cls, ops, builder: Builder | None = None) -> Op:
        return mkop("Tuple", [_value(o, "tuple") for o in ops], builder=builder)

    @classmethod
    def concat_in_dim(cls, ops, dimension: int, builder: Builder | None = None) -> Op:
        return mkop("ConcatInDim", [_value(o, "concat_in_dim") for o in ops],
                    builder=builder, dimension=dimension)

    @classmethod
    def call(cls, computation, ops, builder: Builder | None = None) -> Op:
        computation = Op.make_computation("Call", computation, ops)
        return mkop("Call", [_value(o, "call") for o in ops], builder=builder,
                    computation=computation)

    @classmethod
    def sort(cls, ops, comparator=None, dimension=None, is_stable=None) -> Op:
        return mkop("Sort", [_value(o, "sort") for o in ops], comparator=comparator,
                    dimension=dimension, is_stable=is_stable)

    @classmethod
    def map(cls, ops, computation, dimensions, static_operands=(), builder=None) -> Op:
        shapes = [o.shape().as_scalar() for o in ops]
        shapes += [o.shape() for o in static_operands]
        computation = Op.make_computation("Map", computation, shapes)
        return mkop("Map", [_value(o, "map") for o in ops], builder=builder,
                    computation=computation, dimensions=dimensions,
                    static_operands=tuple(_value(o, "map") for o in static_operands))

    @classmethod
    def constant(cls, builder: Builder, value) -> Op:
        return mkleaf("Constant", builder, value=value)

    @classmethod
    def scalar(cls, builder: Builder, value, dtype: str | None = None) -> Op:
        return mkleaf("Constant", builder,
                      value=torch.tensor(value, dtype=cls.to_torch_type(dtype)))

    @classmethod
    def zero(cls, builder: Builder, dtype: str | None = None) -> Op:
        return cls.scalar(builder, 0, dtype=dtype)

    @classmethod
    def one(cls, builder: Builder, dtype: str | None = None) -> Op:
        return cls.scalar(builder, 1, dtype=dtype)

    @classmethod
    def iota(cls, builder: Builder, shape: Shape, iota_dimension: int) -> Op:
        return mkleaf("Iota", builder, shape=shape.shape, iota_dimension=iota_dimension)

    @classmethod
    def to_torch_type(cls, dtype: str | None) -> torch.dtype:
        """The torch dtype of an XLA element type (float32 for None)."""
        return dtypes.to_torch(xla_ops.dtype_of(dtype)) if dtype else torch.float32

    def __repr__(self) -> str:
        return f"Op({self.shape().shape})"


def _value(operand: Any, where: str = "operation") -> Any:
    if not isinstance(operand, Op):
        raise TypeError(f"{where}: expected an xb.Op operand, got {type(operand).__name__}; "
                        "make constants with xb.Op.scalar(builder, value, dtype) or "
                        "xb.Op.constant(builder, tensor)")
    return operand.op


_CONV_DIMENSIONS = (
    "input_batch_dimension", "input_feature_dimension", "kernel_input_feature_dimension",
    "kernel_output_feature_dimension", "output_batch_dimension", "output_feature_dimension",
    "input_spatial_dimensions", "kernel_spatial_dimensions", "output_spatial_dimensions",
)


def _dims(positional: tuple, named: dict) -> dict:
    # the nine dimension arguments of the general convolutions, by position or by name
    dims = dict(zip(_CONV_DIMENSIONS, positional, strict=False))
    unknown = set(named) - set(_CONV_DIMENSIONS)
    if unknown:
        raise TypeError(f"unexpected convolution arguments: {sorted(unknown)}")
    dims.update(named)
    missing = [d for d in _CONV_DIMENSIONS if d not in dims]
    if missing:
        raise TypeError(f"missing convolution dimension arguments: {missing}")
    return dims


def create_builder(name: str) -> Builder:
    """A builder (the computation's name); `create_computation` gives it its parameters."""
    return Builder(name)


def mkshape(dtype: str, sizes: Sequence[int], dynamic_dimensions=None) -> Shape:
    return Shape.create(dtype, sizes, dynamic_dimensions=dynamic_dimensions)


def mkop(name: str, ops: Sequence[Any], builder: Builder | None = None, **kwargs) -> Op:
    """XLA operation `name` on the values `ops` (the `.op` of `Op`s) with its attributes."""
    return Op(xla_ops.apply(name, list(ops), kwargs), builder)


def mkleaf(name: str, builder: Builder, **kwargs) -> Op:
    """An operation without operands (`Constant`, `Iota`) of `builder`."""
    return Op(xla_ops.apply(name, [], kwargs), builder)


def mkparam(builder: Builder, param_no: int, shape: Shape) -> Op:
    """Parameter `param_no` of the computation `builder` is tracing."""
    if param_no >= len(builder.params):
        raise ValueError(
            f"{builder!r} has no parameter {param_no}: parameters exist only while "
            "create_computation traces the computation; make computations with "
            "xb.create_computation(name, fn, shapes)")
    value = builder.params[param_no]
    expected = shape.shape if isinstance(shape, Shape) else shape
    if xla_ops.shape_of(value) != _normalized(expected):
        raise ValueError(f"parameter {param_no} of {builder.name!r} has shape "
                         f"{xla_ops.shape_of(value)}, not {expected}")
    return Op(value, builder)


def _normalized(shape: Any) -> Any:
    if isinstance(shape, (list, tuple)):
        return [_normalized(s) for s in shape]
    return {"type": str(shape["type"]), "sizes": tuple(int(d) for d in shape["sizes"])}


def tensor_shape(tensor: Any, device: str = "") -> Shape | list[Shape]:
    """The XLA shape of a tensor (a list of them for a list): its sizes, and the element
    type it is stored with on the device."""
    if isinstance(tensor, (list, tuple)):
        return [tensor_shape(t, device) for t in tensor]
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor_shape: expected a tensor, got {type(tensor).__name__}")
    stored = (dtype_policy.storage(tensor.dtype) if tensor.device.type == "xla"
              else dtypes.to_jax(tensor.dtype))
    return Shape.create(xla_ops.type_name(stored), tensor.shape)


def create_placeholder_tensor(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """An XLA tensor of `shape` and `dtype` on the default device with no value: ops on it
    trace a graph whose parameter it is (nothing is copied to the device); reading it
    raises RuntimeError."""
    device = torch_xla.device()
    node = nodes.Placeholder((tuple(int(d) for d in shape), dtype), device.index or 0)
    return functional.wrap(XLATensor(node))


def create_computation(name: str, fn: Callable, shapes: Sequence[Shape], **kwargs) -> Computation:
    """The computation `fn(*params, **kwargs)` over parameters of `shapes` (`Op`s in,
    an `Op` out), traced now: a mistake in `fn` raises here."""
    return Computation(name, fn, shapes, kwargs)


class ModuleComputation:
    """A computation read from a serialized HloModuleProto (`computation_from_module_proto`,
    e.g. a `LoweringContext`'s `hlo()`): it can be printed, not run (computations run
    here are JAX functions: `create_computation`, `call_jax`)."""

    def __init__(self, name: str, proto: bytes) -> None:
        self.name = name
        try:
            self.computation = xla_client.XlaComputation(bytes(proto))
            self.computation.get_hlo_module()  # parsed now: a bad proto fails here
        except Exception as e:  # noqa: BLE001 - XLA's parse error, said in our words
            raise ValueError(f"computation_from_module_proto({name!r}): not a serialized "
                             f"HloModuleProto ({e})") from e

    def hlo_text(self) -> str:
        return dump.computation_text(self.computation)

    def __repr__(self) -> str:
        return f"ModuleComputation({self.name!r})"


def computation_from_module_proto(name: str, proto: bytes) -> ModuleComputation:
    """The computation a serialized HloModuleProto holds, to print (`get_computation_hlo`)."""
    return ModuleComputation(name, proto)


def get_computation_hlo(computation: Computation | ModuleComputation) -> str:
    """The HLO text of a computation."""
    return computation.hlo_text()


def user_computation(opname: str, args: Sequence[torch.Tensor],
                     computation: Computation) -> list[torch.Tensor]:
    """Record `computation` on XLA tensors `args` (one node of the lazy graph); its
    results as XLA tensors, a tuple's elements in order."""
    if isinstance(computation, ModuleComputation):
        raise TypeError(f"{opname}: {computation!r} was read from an HLO module proto, which "
                        "cannot run here; write it with xb.create_computation, or call a JAX "
                        "function with xb.call_jax.")
    if len(args) != len(computation.shapes):
        raise ValueError(f"{opname}: the computation takes {len(computation.shapes)} "
                         f"arguments, got {len(args)}")
    result = jax_call.call(computation, tuple(args), name=opname)
    return list(result) if isinstance(result, tuple) else [result]


def print_computation(computation: Computation) -> None:
    """Print a computation's HLO to stderr when XLA_OP_PRINT_COMPUTATIONS is set."""
    if xu.getenv_as("XLA_OP_PRINT_COMPUTATIONS", bool, False):
        print(get_computation_hlo(computation), file=sys.stderr)

