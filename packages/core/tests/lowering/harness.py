"""Run a lowering beside torch eager and compare: the oracle for every lowering test.

`check_op(op, args, kwargs)` runs `op` in eager on CPU and its lowering under `jax.jit` on
the same values and raises `Mismatch` naming op, max difference, tolerance and inputs.
`LoweringChecker` is a dispatch mode doing that for every ATen op that some torch code
dispatches, so OpInfo samples and whole training steps can be checked. Tolerances and the
outputs left uncompared, each with its reason, are in `../opinfo_expectations.py`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import torch
from opinfo_expectations import (
    DTYPE_TOLERANCE,
    IGNORED_OPS,
    IGNORED_OUTPUTS,
    OP_DTYPE_TOLERANCE,
    OP_TOLERANCE,
    UNCOMPARED_VALUES,
)
from torch._ops import OpOverload
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

import torch_xla.lowering as lowering
from torch_xla.lowering import dtypes
from torch_xla.lowering.registry import is_out_variant

aten = torch.ops.aten

# In-place overloads whose functional twin does not share the overload name.
INPLACE_TWINS: dict[str, OpOverload] = {
    "aten.bernoulli_.float": aten.bernoulli.p,
    "aten.bernoulli_.Tensor": aten.bernoulli.Tensor,
    "aten.normal_.default": aten.normal_functional.default,
    "aten.uniform_.default": aten.uniform.default,
    "aten.exponential_.default": aten.exponential.default,
    "aten.random_.default": aten.random.default,
    "aten.random_.from": getattr(aten.random, "from"),
    "aten.random_.to": aten.random.to,
    "aten.cauchy_.default": aten.cauchy.default,
    "aten.log_normal_.default": aten.log_normal.default,
    "aten.geometric_.default": aten.geometric.default,
    "aten.copy_.default": aten.copy.default,
    "aten.zero_.default": aten.zero.default,
    "aten.fill_.Scalar": aten.fill.Scalar,
    "aten.fill_.Tensor": aten.fill.Tensor,
    "aten.index_put_.default": aten.index_put.default,
    "aten._index_put_impl_.default": aten._index_put_impl.default,
}


class Mismatch(AssertionError):
    pass


# ---------------------------------------------------------------------------------------
# Conversion.


def to_jax(t: torch.Tensor) -> jax.Array:
    t = t.detach().resolve_conj().resolve_neg()
    if t.dtype == torch.bfloat16:
        return jnp.asarray(t.float().numpy()).astype(jnp.bfloat16)
    return jnp.asarray(t.numpy())


def to_numpy(a) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype == jnp.bfloat16:
        return a.astype(np.float32)
    return a


def torch_to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().resolve_conj().resolve_neg()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.numpy()


def _convert_args(args, kwargs):
    return tree_map(lambda v: to_jax(v) if isinstance(v, torch.Tensor) else v, (args, kwargs))


# ---------------------------------------------------------------------------------------
# Running a lowering.


@dataclasses.dataclass
class Prepared:
    """A lowering bound to concrete inputs: `call(*arrays)` runs it."""

    op: OpOverload
    call: Callable
    arrays: list


def prepare(op: OpOverload, args, kwargs, *, seed: int = 0, expected=None) -> Prepared:
    """Bind op's lowering to jax versions of `args`/`kwargs` and trace it as jax.jit would.

    Tracing catches concretization errors and float64 values that torch would not use.
    """
    entry = lowering.lookup(op)
    if entry is None:
        raise LookupError(f"{op} has no lowering")
    jargs, jkwargs = _convert_args(args, kwargs)
    if entry.needs_rng:
        jkwargs = dict(jkwargs, rng=jax.random.PRNGKey(seed))
    leaves, spec = tree_flatten((jargs, jkwargs))
    is_array = [isinstance(v, jax.Array) for v in leaves]

    def call(*arrays):
        it = iter(arrays)
        filled = [next(it) if flag else v for v, flag in zip(leaves, is_array, strict=False)]
        a, k = tree_unflatten(filled, spec)
        return entry.fn(*a, **k)

    arrays = [v for v, flag in zip(leaves, is_array, strict=False) if flag]
    closed = jax.make_jaxpr(call)(*arrays)
    wide = _wide_float_values(closed.jaxpr)
    # Float64 inside a lowering is a bug when torch's results are 32-bit floats (or
    # narrower) and no input is 64-bit: torch would have computed in float32.
    narrow = {torch.float32, torch.float16, torch.bfloat16, torch.complex64}
    out_dtypes = {e.dtype for e in tree_flatten(expected)[0] if isinstance(e, torch.Tensor)}
    wants_narrow = expected is None or (out_dtypes & narrow and not out_dtypes & {
        torch.float64, torch.complex128})
    if wide and wants_narrow and not any(_is_wide(a.dtype) for a in arrays):
        raise Mismatch(f"{op}: the lowering computes in {wide[0]} although no input is "
                       f"64-bit ({len(wide)} such values): torch would stay in 32-bit")
    return Prepared(op, call, arrays)


def evaluate(prepared: list[Prepared]) -> list:
    """Run many prepared lowerings as ONE jitted program (one compile, as the engine does)."""
    if not prepared:
        return []

    def program(*groups):
        return [p.call(*arrays) for p, arrays in zip(prepared, groups, strict=False)]

    return jax.jit(program)(*[p.arrays for p in prepared])


def run_lowering(op: OpOverload, args, kwargs, *, seed: int = 0):
    """Call op's lowering on jax versions of `args`/`kwargs` under jax.jit."""
    return evaluate([prepare(op, args, kwargs, seed=seed)])[0]


def _is_wide(dtype) -> bool:
    try:
        return np.dtype(dtype) in (np.dtype(np.float64), np.dtype(np.complex128))
    except TypeError:  # PRNG key dtypes
        return False


def _wide_float_values(jaxpr) -> list[str]:
    found = []
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            dtype = getattr(var.aval, "dtype", None)
            if dtype is not None and _is_wide(dtype):
                found.append(f"{np.dtype(dtype).name} ({eqn.primitive.name})")
        for sub in jax.core.jaxprs_in_params(eqn.params):
            found.extend(_wide_float_values(sub))
    return found


def _tolerance(op_name: str, dtype: torch.dtype) -> tuple[float, float]:
    per_dtype = OP_DTYPE_TOLERANCE.get((op_name, dtype))
    if per_dtype is not None:
        return per_dtype[:2]
    if op_name in OP_TOLERANCE and dtype in (torch.float32, torch.complex64, torch.float64,
                                              torch.complex128):
        rtol, atol, _ = OP_TOLERANCE[op_name]
        return max(rtol, DTYPE_TOLERANCE[dtype][0]), max(atol, DTYPE_TOLERANCE[dtype][1])
    return DTYPE_TOLERANCE.get(dtype, (0.0, 0.0))


def _describe(args, kwargs) -> str:
    def short(v):
        if isinstance(v, torch.Tensor):
            return f"Tensor{tuple(v.shape)}:{str(v.dtype).replace('torch.', '')}"
        return repr(v)

    parts = [str(tree_map(short, a)) for a in args]
    parts += [f"{k}={tree_map(short, v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


def compare_outputs(op_name: str, expected, actual, args=(), kwargs=None,
                    values: bool = True) -> None:
    """Raise Mismatch unless `actual` (jax) matches `expected` (torch eager)."""
    kwargs = kwargs or {}
    exp_leaves, _ = tree_flatten(expected)
    act_leaves, _ = tree_flatten(
        list(actual) if isinstance(actual, (tuple, list)) else actual)
    where = f"{op_name}({_describe(args, kwargs)})"
    if len(exp_leaves) != len(act_leaves):
        raise Mismatch(f"{where}: {len(act_leaves)} outputs, torch gives {len(exp_leaves)}")
    ignored = IGNORED_OUTPUTS.get(op_name, ((), ""))[0]
    for i, (e, a) in enumerate(zip(exp_leaves, act_leaves, strict=False)):
        if i in ignored or e is None:
            continue
        if not isinstance(e, torch.Tensor):
            if isinstance(e, (int, float, bool)) and values:
                got = a.item() if hasattr(a, "item") else a
                if not np.isclose(got, e, equal_nan=True):
                    raise Mismatch(f"{where}: output {i} is {got}, torch gives {e}")
            continue
        if a is None:
            raise Mismatch(f"{where}: output {i} is None, torch gives a tensor")
        a = jnp.asarray(a)
        if tuple(a.shape) != tuple(e.shape):
            raise Mismatch(f"{where}: output {i} has shape {tuple(a.shape)}, torch "
                           f"{tuple(e.shape)}")
        wider = {torch.float32: np.float64, torch.complex64: np.complex128}.get(e.dtype)
        if wider is not None and a.dtype == wider:
            raise Mismatch(f"{where}: output {i} computed in {a.dtype} where torch uses "
                           f"{e.dtype}")
        if not values:
            continue
        try:
            torch_dtype = dtypes.to_torch(a.dtype)
        except TypeError:
            torch_dtype = e.dtype
        got = torch.from_numpy(np.array(to_numpy(a)))
        if torch_dtype != e.dtype:
            got = got.to(e.dtype) if e.dtype != torch.bfloat16 else got.to(torch.bfloat16)
        want = e.detach().resolve_conj().resolve_neg()
        if want.dtype in (torch.bfloat16,):
            got, want = got.to(torch.bfloat16), want
        rtol, atol = _tolerance(op_name, e.dtype)
        try:
            torch.testing.assert_close(got.to(want.dtype), want, rtol=rtol, atol=atol,
                                       equal_nan=True, check_stride=False,
                                       check_device=False)
        except AssertionError as err:
            detail = str(err).strip().splitlines()
            raise Mismatch(f"{where}: output {i} (rtol={rtol}, atol={atol}): "
                           + " ".join(detail[:4])) from None


def check_op(op: OpOverload, args, kwargs=None) -> None:
    """Run op in eager and its lowering; raise Mismatch on any difference."""
    kwargs = kwargs or {}
    snapshot = tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v,
                        (args, kwargs))
    expected = op(*args, **kwargs)
    name = str(op)
    entry = lowering.lookup(op)
    actual = evaluate([prepare(op, *snapshot, expected=expected)])[0]
    values = name not in UNCOMPARED_VALUES and not entry.needs_rng
    compare_outputs(name, expected, actual, *snapshot, values=values)


# ---------------------------------------------------------------------------------------
# The dispatch mode.


def functional_twin(op: OpOverload) -> OpOverload | None:
    """`add_.Tensor` -> `add.Tensor`; None if op is not in-place or has no twin."""
    name = str(op)
    if name in INPLACE_TWINS:
        return INPLACE_TWINS[name]
    packet_name = op._schema.name.split("::")[1]
    if not packet_name.endswith("_") or packet_name.endswith("__"):
        return None
    packet = getattr(aten, packet_name[:-1], None)
    if packet is None:
        return None
    same_name = getattr(packet, op._overloadname, None)
    if same_name is not None:
        return same_name
    names = [a.name for a in op._schema.arguments]
    for overload_name in packet.overloads():
        candidate = getattr(packet, overload_name)
        if [a.name for a in candidate._schema.arguments] == names:
            return candidate
    return None


def is_composite_implicit(op: OpOverload) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


def _mutated_values(op: OpOverload, args, kwargs):
    """What an in-place op's functional twin returns: the values of the written arguments."""
    written = []
    for i, arg in enumerate(op._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            written.append(args[i] if i < len(args) else kwargs[arg.name])
    return written[0] if len(written) == 1 else tuple(written)


@dataclasses.dataclass
class Outcome:
    op: str
    # "native", "decomposed", "fallback" (data-dependent shape: CPU by design), "missing",
    # "failing", "skipped"
    status: str
    detail: str = ""


@dataclasses.dataclass
class _Pending:
    prepared: Prepared
    expected: object
    snapshot: tuple


class LoweringChecker(TorchDispatchMode):
    """For each ATen op dispatched: run eager, then the lowering (or decomposition), compare.

    Lowerings are traced as they are seen and evaluated together, as one jitted program,
    when the mode exits (or `flush()` is called). Outcomes are collected in
    `self.outcomes`.
    """

    def __init__(self, decompose: bool = True):
        super().__init__()
        self.decompose = decompose
        self.outcomes: list[Outcome] = []
        self.pending: list[_Pending] = []

    def _record(self, op_name, status, detail=""):
        self.outcomes.append(Outcome(op_name, status, detail))

    def __exit__(self, *exc):
        result = super().__exit__(*exc)
        if exc[0] is None:
            self.flush()
        return result

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        if name in IGNORED_OPS or not name.startswith("aten.") or is_out_variant(func):
            return func(*args, **kwargs)
        if is_composite_implicit(func):
            # A PrivateUse1 tensor never sees these: they decompose above dispatch.
            with self._inner():
                return func.decompose(*args, **kwargs)
        target = functional_twin(func) or func
        snapshot = tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v,
                            (args, kwargs))
        result = func(*args, **kwargs)
        expected = _mutated_values(func, args, kwargs) if target is not func else result
        self._check(target, expected, snapshot)
        return result

    def _check(self, op, expected, snapshot):
        name = str(op)
        if lowering.lookup(op) is None:
            self._check_decomposition(op, expected, snapshot)
            return
        try:
            prepared = prepare(op, *snapshot, expected=expected)
        except lowering.DataDependentShapeError as err:
            self._record(name, "fallback", str(err)[:200])
            return
        except Mismatch as err:
            self._record(name, "failing", str(err))
            return
        except Exception as err:  # noqa: BLE001 - any crash is a finding to report
            self._record(name, "failing", f"lowering raised {type(err).__name__}: "
                         f"{str(err)[:300]}")
            return
        expected = tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v,
                            expected)
        self.pending.append(_Pending(prepared, expected, snapshot))

    def _check_decomposition(self, op, expected, snapshot):
        name = str(op)
        decomposition = lowering.decompositions().get(op)
        if decomposition is None:
            self._record(name, "missing", "no lowering and no decomposition")
            return
        if not self.decompose:
            self._record(name, "decomposed")
            return
        try:
            with self._inner():
                got = decomposition(*snapshot[0], **snapshot[1])
            compare_outputs(name, expected, tree_map(
                lambda v: to_jax(v) if isinstance(v, torch.Tensor) else v, got), *snapshot)
            self._record(name, "decomposed")
        except Mismatch as err:
            self._record(name, "failing", f"decomposition: {err}")
        except Exception as err:  # noqa: BLE001 - any crash is a finding to report
            self._record(name, "failing", f"decomposition raised {type(err).__name__}: "
                         f"{str(err)[:300]}")

    def _inner(self):
        # Re-enter this mode (without flushing) so the decomposition's ops are checked too.
        checker = self

        class _Reenter:
            def __enter__(self):
                TorchDispatchMode.__enter__(checker)

            def __exit__(self, *exc):
                TorchDispatchMode.__exit__(checker, *exc)

        return _Reenter()

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        try:
            results = evaluate([p.prepared for p in pending])
        except Exception:  # noqa: BLE001 - fall back to one program per op to find it
            results = []
            for p in pending:
                try:
                    results.append(evaluate([p.prepared])[0])
                except Exception as err:  # noqa: BLE001
                    results.append(err)
        for p, actual in zip(pending, results, strict=False):
            name = str(p.prepared.op)
            if isinstance(actual, Exception):
                self._record(name, "failing", f"lowering raised {type(actual).__name__} "
                             f"under jit: {str(actual)[:300]}")
                continue
            entry = lowering.lookup(p.prepared.op)
            values = name not in UNCOMPARED_VALUES and not entry.needs_rng
            try:
                compare_outputs(name, p.expected, actual, *p.snapshot, values=values)
                self._record(name, "native")
            except Mismatch as err:
                self._record(name, "failing", str(err))

    def summary(self) -> Counter:
        return Counter(o.status for o in self.outcomes)

    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status in ("failing", "missing")]


def run_checked(fn: Callable, *args, **kwargs) -> LoweringChecker:
    """Run fn(*args, **kwargs) under a LoweringChecker and return it."""
    checker = LoweringChecker()
    with checker:
        fn(*args, **kwargs)
    return checker
