"""StableHLO composites as JAX: `call` traces a function and emits it as one
`stablehlo.composite "name" %args {composite_attributes = {...}, decomposition = @fn}`,
the form PyTorch/XLA gives a marked pattern (`torch.ops.xla.mark_tensor`).

`jax.lax.composite` emits the same op but names the decomposition after the op
(`@name`); PyTorch/XLA names it `@name.impl`, and programs that look the bodies up
(converters to other runtimes) rely on it, so this module has its own primitive whose
decomposition name the caller chooses. Compilers that do not know the composite inline
its decomposition: it computes exactly what its body does.

Attributes are typed as PyTorch/XLA types them: int -> i64, float -> f32, bool -> i1
(`true`), str -> string, and a flat list of one of those kinds -> a dense 1-D tensor
(`dense<[1, 2]> : tensor<2xi64>`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax._src import core
from jax._src.interpreters import mlir
from jax._src.lib.mlir import ir
from jax._src.lib.mlir.dialects import hlo
from jax.extend.core import Primitive

# One attribute value: a scalar, or a tuple of scalars of one kind.
AttrValue = Any

_DENSE_DTYPES = {bool: np.bool_, int: np.int64, float: np.float32}


def attribute_kind(value: AttrValue) -> type | None:
    """The kind of an attribute value: bool, int, float or str for a scalar, `list` for a
    flat, non-empty list (or tuple) of bools, ints or floats of one kind; None when a
    composite cannot carry it."""
    if isinstance(value, (list, tuple)):
        kinds = {_scalar_kind(v) for v in value}
        return list if len(kinds) == 1 and kinds <= set(_DENSE_DTYPES) else None
    return _scalar_kind(value)


def _scalar_kind(value: AttrValue) -> type | None:
    for kind in (bool, int, float, str):  # bool first: a bool is an int too
        if isinstance(value, kind):
            return kind
    return None


def _mlir_attribute(value: AttrValue) -> ir.Attribute:
    if isinstance(value, (list, tuple)):
        return mlir.ir_attribute(np.asarray(value, _DENSE_DTYPES[_scalar_kind(value[0])]))
    if isinstance(value, bool):
        return ir.BoolAttr.get(value)
    if isinstance(value, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)
    if isinstance(value, float):
        return ir.FloatAttr.get(ir.F32Type.get(), value)
    return ir.StringAttr.get(value)


composite_p = Primitive("xla_composite")
composite_p.multiple_results = True


@composite_p.def_impl
def _impl(*args: Any, jaxpr: core.ClosedJaxpr, **_: Any) -> list:
    return core.jaxpr_as_fun(jaxpr)(*args)


@composite_p.def_abstract_eval
def _abstract_eval(*args: Any, jaxpr: core.ClosedJaxpr, **_: Any) -> list:
    return jaxpr.out_avals


def _lowering(ctx: mlir.LoweringRuleContext, *args: Any, name: str, decomposition: str,
              attributes: tuple, jaxpr: core.ClosedJaxpr) -> Sequence[ir.Value]:
    func, _, _ = mlir.lower_called_computation(
        decomposition, jaxpr, ctx.module_context, 0, ctx.avals_in, ctx.avals_out,
        ctx.tokens_in)
    op = hlo.CompositeOp(
        func.type.results, list(args), name=ir.StringAttr.get(name),
        decomposition=ir.FlatSymbolRefAttr.get(func.name.value),
        composite_attributes=ir.DictAttr.get(
            {k: _mlir_attribute(v) for k, v in attributes}),
        version=mlir.i32_attr(0))
    return op.results


mlir.register_lowering(composite_p, _lowering)


def call(body: Callable[..., Sequence[Any]], args: Sequence[Any], name: str,
         decomposition: str, attributes: tuple = ()) -> list:
    """`body(*args)` (a list of arrays) emitted as the composite `name` whose
    decomposition is the function `decomposition` (a name not otherwise used in the
    module); `attributes`: `((key, value), ...)`, values as `attribute_kind` accepts."""
    avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
    jaxpr = jax.make_jaxpr(lambda *xs: list(body(*xs)))(*avals)
    return composite_p.bind(*args, name=name, decomposition=decomposition,
                            attributes=tuple(attributes), jaxpr=jaxpr)
