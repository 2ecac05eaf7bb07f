"""`scan`: a function applied along the leading dimension of tensors in one XLA While loop.

PyTorch/XLA's `torch_xla.experimental.scan`, modelled on `jax.lax.scan`:

    def cumsum_step(carry, x):
        carry = carry + x
        return carry, carry

    final, ys = scan(cumsum_step, torch.zeros(2, device=dev), xs)   # xs: [steps, 2]

equals the Python loop `for x in xs: carry, y = fn(carry, x)` (the `y`s stacked), and
differentiates the same, but the program holds `fn` once, not once per step.

How: AOTAutograd traces `fn` once on example tensors and splits it (`partition_fn`
decides what the backward recomputes) into a forward graph, which also returns the
activations the backward needs, and a backward graph. Each graph is then recorded once
on the engine over placeholders and run as one scan node (`torch_xla.lazy.loop.scan_loop`,
lowered to `jax.lax.scan`): the forward over `xs`, stacking its activations, and in the
backward the backward graph over the stacked activations, last step first. A random op
inside `fn` draws other numbers at each step.

`fn` must be traceable by AOTAutograd: it may not read values (`.item()`, printing),
change its inputs in place, or touch XLA tensors other than its arguments (pass them in
`xs` or create them inside). With `is_fn_pure=True` (the default) the traced graphs are
kept per `fn` and signature, so calling `scan` again with the same `fn` skips tracing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from functorch.compile import aot_function, default_partition, make_boxed_func
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import PyTree, TreeSpec, tree_flatten, tree_map, tree_unflatten

from torch_xla.experimental.eager import eager_mode_context
from torch_xla.lazy import functional, graph, loop
from torch_xla.lazy.tensor import XLATensor, common_device

__all__ = ["scan", "tree_flatten_none", "value_and_grad_partitioned"]

Carry = TypeVar("Carry")
X = TypeVar("X")
Y = TypeVar("Y")


def scan(
    fn: Callable[[Carry, X], tuple[Carry, Y]],
    init: Carry,
    xs: X,
    partition_fn: Callable = default_partition,
    is_fn_pure: bool = True,
) -> tuple[Carry, Y]:
    """Apply `fn(carry, x) -> (new_carry, y)` over the leading dimension of `xs`, threading
    the carry, in one XLA While loop (see the module).

    `init` and `xs` may be any pytrees of XLA tensors; every leaf of `xs` is sliced along
    dimension 0 (all leaves equally long). Returns the last carry and `fn`'s `y`s stacked
    along a new dimension 0 (a `None` leaf stays `None`). `partition_fn` (AOTAutograd's,
    e.g. `functorch.compile.min_cut_rematerialization_partition`) chooses what the
    backward recomputes instead of saving. `is_fn_pure`: `fn` depends only on its
    arguments, so its traced graphs may be kept and reused."""
    if not callable(fn):
        raise ValueError(f"scan: fn must be callable, got {fn!r} ({type(fn).__name__})")
    flat_init, init_spec = tree_flatten(init)
    flat_xs, _ = tree_flatten(xs)
    _check_tensors("init", flat_init)
    _check_tensors("xs", flat_xs)
    common_device([*flat_init, *flat_xs])
    _steps(flat_xs, xs)
    traced = _traced(fn, init, xs, partition_fn, is_fn_pure)
    outs = list(_Scan.apply(traced, *flat_init, *flat_xs))
    return tree_unflatten(outs[:traced.carry], init_spec), traced.unflatten_out(outs)[1]


# --- pytrees with None leaves ------------------------------------------------------


def tree_flatten_none(pytree: PyTree) -> tuple[list, Callable[[Sequence], PyTree]]:
    """The leaves of `pytree` without its `None`s, and the function that rebuilds the tree
    (the `None`s back in place) from such a list."""
    leaves, spec = tree_flatten(pytree)
    kept = [leaf for leaf in leaves if leaf is not None]
    holes = [leaf is None for leaf in leaves]

    def unflatten(flat: Sequence) -> PyTree:
        it = iter(flat)
        return tree_unflatten([None if hole else next(it) for hole in holes], spec)

    return kept, unflatten


# --- checking the arguments ----------------------------------------------------------


def _check_tensors(name: str, leaves: list) -> None:
    for leaf in leaves:
        if leaf is None:
            raise ValueError(f"scan: {name} has a None leaf; its leaves must be tensors "
                             "(leave the None out of the tree)")
        if not isinstance(leaf, torch.Tensor):
            raise ValueError(f"scan: every leaf of {name} must be a tensor, got "
                             f"{type(leaf).__name__} ({leaf!r:.60})")


def _steps(flat_xs: list[torch.Tensor], xs: Any) -> int:
    """The common leading dimension of the leaves of `xs`: the number of iterations."""
    if not flat_xs:
        raise ValueError(f"scan: xs {xs!r:.80} is an empty PyTree: it must hold at least one "
                         "tensor, whose leading dimension is the number of iterations")
    for leaf in flat_xs:
        if leaf.dim() == 0:
            raise ValueError("scan: the leaves of xs are scanned along dimension 0, but one "
                             "is a 0-dimensional tensor; add a leading dimension")
    lengths = sorted({leaf.size(0) for leaf in flat_xs})
    if len(lengths) > 1:
        raise ValueError(f"scan: the leaves of the xs PyTree must have the same leading "
                         f"dimension size, got sizes {lengths}")
    if lengths[0] == 0:
        raise ValueError("scan: the leaves of xs have leading dimension 0; scan needs at "
                         "least one iteration")
    return lengths[0]


# --- tracing fn with AOTAutograd -------------------------------------------------------


@dataclass
class _Traced:
    """`fn` traced on one signature and split into forward and backward graphs."""

    forward: Callable  # (*carry, *x) -> (*new_carry, *y, *activations)
    backward: Callable | None  # (*activations, *tangents) -> one gradient (or None) per input
    carry: int  # carry leaves
    holes: tuple[bool, ...]  # per leaf of (new_carry, y) (as the forward returns them): None
    out_spec: TreeSpec  # of (new_carry, y)
    differentiable: tuple[bool, ...]  # per output leaf: the backward takes its tangent
    grad_of_carry: tuple[bool, ...]  # per carry leaf: floating, so gradients flow through it
    grad_of_x: tuple[bool, ...]  # per x leaf: its gradient is wanted
    x_avals: tuple[tuple, ...]  # per x leaf: one slice's (shape, dtype, device)
    carry_spec: TreeSpec
    x_spec: TreeSpec

    @property
    def outputs(self) -> int:
        """The leaves of (new_carry, y) that are tensors."""
        return self.holes.count(False)

    def unflatten_out(self, leaves: Sequence[torch.Tensor]) -> PyTree:
        """(new_carry, y) from its tensor leaves."""
        it = iter(leaves)
        return tree_unflatten([None if hole else next(it) for hole in self.holes],
                              self.out_spec)

    def run_forward(self, carry: Sequence, x: Sequence) -> tuple[list, list]:
        """The forward graph: (the tensor leaves of (new_carry, y), the activations)."""
        out = list(self.forward(*carry, *x))
        n = len(self.holes)
        return [t for t, hole in zip(out[:n], self.holes, strict=True) if not hole], out[n:]


_TRACED: OrderedDict[tuple, _Traced] = OrderedDict()
_KEPT = 256  # traced signatures of pure functions kept (least recently used dropped)


def _traced(fn: Callable, init: Any, xs: Any, partition_fn: Callable, pure: bool) -> _Traced:
    if not pure:
        return _trace(fn, init, xs, partition_fn)
    carry, carry_spec = tree_flatten(init)
    x, x_spec = tree_flatten(xs)
    key = (fn, partition_fn, carry_spec, x_spec,
           tuple((tuple(t.shape), t.dtype, t.device) for t in carry),
           tuple((tuple(t.shape), t.dtype, t.device, t.requires_grad) for t in x))
    found = _TRACED.get(key)
    if found is None:
        found = _TRACED[key] = _trace(fn, init, xs, partition_fn)
        while len(_TRACED) > _KEPT:
            _TRACED.popitem(last=False)
    _TRACED.move_to_end(key)
    return found


def _differentiable(t: torch.Tensor) -> bool:
    return t.dtype.is_floating_point or t.dtype.is_complex


def _example(shape: Sequence[int], like: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    return torch.empty(tuple(shape), dtype=like.dtype, device=like.device,
                       requires_grad=requires_grad)


def _trace(fn: Callable, init: Any, xs: Any, partition_fn: Callable) -> _Traced:
    """Trace `fn` with AOTAutograd on examples shaped like `init` and one slice of `xs`.

    The carry's examples require gradients whenever they can (a gradient reaches the
    carry from later steps even if `init` needs none); an x's only if the x does."""
    carry, carry_spec = tree_flatten(init)
    x, x_spec = tree_flatten(xs)
    grad_of_carry = tuple(map(_differentiable, carry))
    grad_of_x = tuple(t.requires_grad and _differentiable(t) for t in x)
    examples_carry = [_example(t.shape, t, g) for t, g in zip(carry, grad_of_carry, strict=True)]
    examples_x = [_example(t.shape[1:], t, g) for t, g in zip(x, grad_of_x, strict=True)]
    graphs: dict[str, torch.fx.GraphModule] = {}
    compiled = aot_function(_checked(fn, init), fw_compiler=_keep(graphs, "forward"),
                            bw_compiler=_keep(graphs, "backward"), partition_fn=partition_fn)
    with torch.enable_grad():
        out = compiled(tree_unflatten(examples_carry, carry_spec),
                       tree_unflatten(examples_x, x_spec))
        leaves, out_spec = tree_flatten(out)
        holes = tuple(t is None for t in leaves)
        leaves = [t for t in leaves if t is not None]
        differentiable = tuple(t.requires_grad for t in leaves)
        wanted = [t for t in leaves if t.requires_grad]
        if wanted:  # AOTAutograd builds the backward graph when the backward first runs
            torch.autograd.backward(wanted, [torch.ones_like(t) for t in wanted])
    x_avals = tuple((tuple(t.shape[1:]), t.dtype, t.device) for t in x)
    return _Traced(graphs["forward"], graphs.get("backward"), len(carry), holes, out_spec,
                   differentiable, grad_of_carry, grad_of_x, x_avals, carry_spec, x_spec)


class _TracingGuard(TorchFunctionMode):
    """While AOTAutograd traces `fn`: `torch.tensor(data, device=xla)` is made on the CPU
    and moved, so the data is a constant of the graph without a read back from the
    device; a real XLA tensor that `fn` reaches outside its arguments is an error."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.tensor and _on_xla(kwargs.get("device")):
            device = kwargs.pop("device")
            return func(*args, **kwargs).to(device)
        for leaf in tree_flatten((args, kwargs))[0]:
            if _outside(leaf):
                raise AssertionError(
                    f"scan: fn used an XLA tensor of shape {tuple(leaf.shape)} and dtype "
                    f"{leaf.dtype} that is not one of its arguments (in {func.__name__}). "
                    "scan traces fn with AOTAutograd on FakeTensors, so fn may only use the "
                    "tensors it is given and the ones it creates; pass this one in init "
                    "(or in xs, one slice per step) instead of reading it from a global or a "
                    "closure, and return any update of it.")
        return func(*args, **kwargs)


def _on_xla(device: Any) -> bool:
    return device is not None and torch.device(device).type == "xla"


def _outside(leaf: Any) -> bool:
    """A real (not traced) XLA tensor."""
    return (isinstance(leaf, torch.Tensor) and not isinstance(leaf, (FakeTensor, FunctionalTensor))
            and leaf.device.type == "xla")


def _keep(graphs: dict, name: str) -> Callable:
    def compiler(gm: torch.fx.GraphModule, _example_inputs) -> Callable:
        graphs[name] = gm
        return make_boxed_func(gm)

    return compiler


def _checked(fn: Callable, init: Any) -> Callable:
    """`fn`, whose result is checked to be `(new_carry, y)` with `new_carry` shaped as
    `init`."""
    carry, carry_spec = tree_flatten(init)
    name = getattr(fn, "__qualname__", None) or type(fn).__name__

    def checked(carry_in: Any, x: Any) -> Any:
        with _TracingGuard():
            out = fn(carry_in, x)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise ValueError(f"scan: fn ({name}) must return a pair (new_carry, y), got "
                             f"{_describe(out)}")
        new, spec = tree_flatten(out[0])
        if spec != carry_spec:
            raise ValueError(f"scan: fn ({name}) returned a carry of structure {spec}, but "
                             f"init has structure {carry_spec}: the carry keeps its "
                             "structure from one step to the next")
        for k, (a, b) in enumerate(zip(new, carry, strict=True)):
            if not isinstance(a, torch.Tensor) or (a.shape, a.dtype) != (b.shape, b.dtype):
                raise ValueError(f"scan: carry leaf {k} returned by fn ({name}) is "
                                 f"{_describe(a)}, but init's is {_describe(b)}: the carry "
                                 "keeps its shapes and dtypes from one step to the next")
        inputs = {id(t) for t in tree_flatten((carry_in, x))[0]}
        return tree_map(lambda t: _unaliased(t, inputs), tuple(out))

    return checked


def _unaliased(t: Any, inputs: set[int]) -> Any:
    """`t`, copied if it is an input or a view: AOTAutograd returns such an output outside
    its graphs (the backward graph takes no gradient for it), which a loop cannot do."""
    if isinstance(t, torch.Tensor) and (id(t) in inputs or t._is_view()):
        return t.clone()
    return t


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of length {len(value)}"
    return type(value).__name__


# --- the traced graphs as step functions ---------------------------------------------


def _split(seq: Sequence, *sizes: int) -> list:
    out, start = [], 0
    for size in sizes:
        out.append(list(seq[start:start + size]))
        start += size
    return out + [list(seq[start:])]


def _forward_step(traced: _Traced) -> Callable:
    """Flat (carry, x) -> (new carry, y leaves + activations)."""

    def step(carry: list, x: list) -> tuple[list, list]:
        outputs, activations = traced.run_forward(carry, x)
        new_carry, ys = _split(outputs, traced.carry)
        return new_carry, ys + activations

    return step


def _backward_step(traced: _Traced) -> Callable:
    """Flat (carry: the gradients of the floating carry leaves, x: the tangents of the
    differentiable y leaves, then the activations) -> (the gradients of the floating carry
    leaves, of the wanted x leaves); zeros where the graph gave none (an unused input)."""
    carry_in = [k for k, g in enumerate(traced.grad_of_carry) if g]
    y_in = [k for k, d in enumerate(traced.differentiable[traced.carry:]) if d]

    def step(grad_carry: list, x: list) -> tuple[list, list]:
        grad_y, activations = _split(x, len(y_in))
        tangents = dict(zip(carry_in, grad_carry, strict=True))
        tangents.update((traced.carry + k, g) for k, g in zip(y_in, grad_y, strict=True))
        picked = [tangents[k] for k, d in enumerate(traced.differentiable) if d]
        of_carry, of_x = _split(list(traced.backward(*activations, *picked)), traced.carry)
        out_carry = [_or_zeros(of_carry[k], grad_carry[j]) for j, k in enumerate(carry_in)]
        out_x = [_or_zeros(g, a) for g, a, wanted
                 in zip(of_x, traced.x_avals, traced.grad_of_x, strict=True) if wanted]
        return out_carry, out_x

    return step


def _or_zeros(grad: torch.Tensor | None, like: torch.Tensor | tuple) -> torch.Tensor:
    if grad is not None:
        return grad
    if isinstance(like, torch.Tensor):
        return torch.zeros_like(like)
    shape, dtype, device = like
    return torch.zeros(shape, dtype=dtype, device=device)


# --- the autograd node ---------------------------------------------------------------


class _Scan(torch.autograd.Function):
    """The forward graph scanned over `xs` (its activations saved, stacked), and as the
    backward the backward graph scanned over them from the last step to the first."""

    @staticmethod
    def forward(ctx: Any, traced: _Traced, *flat: torch.Tensor) -> tuple:
        init, xs = _split(flat, traced.carry)
        carry, rest = _scan_flat(_forward_step(traced), init, xs)
        outputs, activations = _split(carry + rest, traced.outputs)
        ctx.traced = traced
        ctx.avals = [(tuple(t.shape), t.dtype, t.device) for t in outputs]
        ctx.save_for_backward(*activations)
        ctx.mark_non_differentiable(*(t for t, d in zip(outputs, traced.differentiable,
                                                           strict=True) if not d))
        return tuple(outputs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple:
        traced: _Traced = ctx.traced
        grads = [_or_zeros(g, a) for g, a in zip(grads, ctx.avals, strict=True)]
        grad_carry, grad_ys = _split(grads, traced.carry)
        carry_in = [g for g, wanted in zip(grad_carry, traced.grad_of_carry, strict=True)
                    if wanted]
        y_in = [g for g, d in zip(grad_ys, traced.differentiable[traced.carry:], strict=True)
                if d]
        grad_init, grad_xs = _scan_flat(_backward_step(traced), carry_in,
                                        [*y_in, *ctx.saved_tensors], reverse=True)
        init_grads, x_grads = iter(grad_init), iter(grad_xs)
        found = [next(init_grads) if g else None for g in traced.grad_of_carry]
        found += [next(x_grads) if g else None for g in traced.grad_of_x]
        needed = ctx.needs_input_grad[1:]
        return (None, *(g if need else None for g, need in zip(found, needed, strict=True)))


# --- recording a step function and running it as one loop node ---------------------


def _scan_flat(step: Callable[[list, list], tuple[list, list]], init: list[torch.Tensor],
               xs: list[torch.Tensor], reverse: bool = False) -> tuple[list, list]:
    """Record `step(carry, x) -> (new_carry, ys)` once over placeholders and scan it over
    the leading dimension of `xs` in one node; the final carry and the stacked ys."""
    steps = xs[0].size(0) if xs else 0
    device = common_device([*init, *xs])
    slots = [loop.placeholder(t.shape, t.dtype, device) for t in init]
    slots += [loop.placeholder(t.shape[1:], t.dtype, device) for t in xs]
    try:
        with eager_mode_context(False) as was_eager, torch.no_grad():
            outs = _record(step, slots, init, xs, steps, reverse)
    except BaseException:
        loop.discard_recorded()
        raise
    if was_eager:
        graph.materialize(outs[0] + outs[1])
    return [functional.wrap(t) for t in outs[0]], [functional.wrap(t) for t in outs[1]]


def _record(step: Callable, slots: list[XLATensor], init: list[torch.Tensor],
            xs: list[torch.Tensor], steps: int, reverse: bool) -> tuple[list, list]:
    inputs = [functional.wrap(s) for s in slots]
    new_carry, ys = step(inputs[:len(init)], inputs[len(init):])
    new_carry = [functional.unwrap(t) for t in new_carry]
    ys = [functional.unwrap(t) for t in ys]
    for k, (new, old) in enumerate(zip(new_carry, init, strict=True)):
        if (new.shape, new.dtype) != (old.shape, old.dtype):
            raise ValueError(f"scan: carry {k} has shape {tuple(new.shape)} and dtype "
                             f"{new.dtype} after a step, but {tuple(old.shape)} and "
                             f"{old.dtype} before: a carry keeps its shape and dtype")
    outs = loop.scan_loop(steps, slots, [functional.unwrap(t) for t in init],
                          [functional.unwrap(t) for t in xs], new_carry, ys, reverse)
    recorded = new_carry + ys
    del inputs, new_carry, ys
    if loop.forget_results(recorded):
        raise NotImplementedError(
            "scan: after recording the step, live tensors hold values computed inside the "
            "loop that it does not return: the step stored a tensor outside (a global, a "
            "module buffer). Return such values in the carry or the ys instead.")
    return outs


# --- PyTorch/XLA's forward/backward pair -------------------------------------------------


def value_and_grad_partitioned(
    fn: Callable[[Carry, X], tuple[Carry, Y]],
    init: Carry,
    xs: X,
    partition_fn: Callable = default_partition,
) -> tuple[Callable, Callable]:
    """`fn(carry, x) -> (new_carry, y)`, traced on `init` and a slice of `xs`, as a pair:

      forward(carry, x) -> (new_carry, (y, activations))
      backward(grad_new_carry, (grad_y, activations)) -> (grad_carry, grad_x)

    `activations` is a tuple of the tensors the backward needs (which `partition_fn`
    chooses); `grad_x` holds None for the leaves of `xs` that need no gradient."""
    traced = _trace(fn, init, xs, partition_fn)
    unflatten_carry = lambda leaves: tree_unflatten(list(leaves), traced.carry_spec)  # noqa: E731
    unflatten_x = lambda leaves: tree_unflatten(list(leaves), traced.x_spec)  # noqa: E731

    def forward(carry: Carry, x: X) -> tuple[Carry, tuple[Y, tuple]]:
        outputs, activations = traced.run_forward(tree_flatten(carry)[0], tree_flatten(x)[0])
        new_carry, y = traced.unflatten_out(outputs)
        return new_carry, (y, tuple(activations))

    def backward(grad_new_carry: Carry, rest: tuple) -> tuple[Carry, X]:
        grad_y, activations = rest
        grads = tree_flatten(grad_new_carry)[0] + tree_flatten_none(grad_y)[0]
        picked = [g for g, d in zip(grads, traced.differentiable, strict=True) if d]
        found = list(traced.backward(*activations, *picked))
        of_carry, of_x = _split(found, traced.carry)
        return unflatten_carry(of_carry), unflatten_x(of_x)

    return forward, backward
