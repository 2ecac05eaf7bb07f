"""XLA custom calls as JAX: `call` emits one `stablehlo.custom_call @target(...)`, the op
PyTorch/XLA's `_xla_custom_call` builds: a kernel the device's compiler knows by name (a
vendor's kernel registered with XLA, `annotate_device_placement` for host offloading).

The op carries the target's name, its `backend_config` string (handed to the kernel as
is), `has_side_effect`, the custom-call API version the kernel was written against and
XLA frontend attributes (strings, as `mhlo.frontend_attributes`). XLA decides what runs:
a target no one registered for the device fails when the program is compiled.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from jax._src import core, dispatch
from jax._src.interpreters import mlir
from jax._src.lib.mlir import ir
from jax._src.lib.mlir.dialects import hlo
from jax.extend.core import Primitive

# XLA's CustomCallApiVersion: 1 the original, 2 status-returning, 3 status-returning with
# the backend config handed to the kernel, 4 typed FFI. PyTorch/XLA's default, 0, is the
# unspecified value, which XLA's builder takes as the original API.
API_VERSIONS = (0, 1, 2, 3, 4)

custom_call_p = Primitive("xla_custom_call")
custom_call_p.multiple_results = True
custom_call_p.def_impl(functools.partial(dispatch.apply_primitive, custom_call_p))


def _abstract_eval(*args: Any, results: tuple, **_: Any) -> list:
    return [core.ShapedArray(shape, dtype) for shape, dtype in results]


custom_call_p.def_abstract_eval(_abstract_eval)


def _lowering(ctx: mlir.LoweringRuleContext, *args: Any, target: str, results: tuple,
              has_side_effect: bool, backend_config: str, api_version: int,
              frontend_attributes: tuple) -> Sequence[Any]:
    extra = None
    if frontend_attributes:
        extra = {"mhlo.frontend_attributes": ir.DictAttr.get(
            {name: ir.StringAttr.get(value) for name, value in frontend_attributes})}
    types = [mlir.aval_to_ir_type(ctx.module_context, a) for a in ctx.avals_out]
    several = len(types) > 1  # one tuple, as XLA's builder makes it (and HLO runs it)
    op = mlir.custom_call(
        target, result_types=[ir.TupleType.get_tuple(types)] if several else types,
        operands=list(args), backend_config=backend_config, has_side_effect=has_side_effect,
        api_version=api_version or 1, extra_attributes=extra)
    if not several:
        return op.results
    return [hlo.get_tuple_element(op.result, mlir.i32_attr(k)) for k in range(len(types))]


mlir.register_lowering(custom_call_p, _lowering)


def call(*args: Any, target: str, results: tuple, has_side_effect: bool = False,
         backend_config: str = "", api_version: int = 0,
         frontend_attributes: tuple = ()) -> list:
    """The results of custom call `target` on `args`: one array per (shape, dtype) of
    `results`; `frontend_attributes` is a tuple of (name, value) strings."""
    return custom_call_p.bind(*args, target=target, results=results,
                              has_side_effect=has_side_effect, backend_config=backend_config,
                              api_version=api_version,
                              frontend_attributes=frontend_attributes)
