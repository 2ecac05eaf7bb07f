"""In-place ops run as their functional forms: kernels at the functionalization key that
call the functional op on the engine tensors inside the user's tensors, then write each
result back into the argument it replaces (`write_back`, which updates every view).

PyTorch's generated functionalization kernel does the same, but first re-checks the call
on meta tensors. Where that check is slow (the foreach ops' meta kernels are Python) or
wrong for us (fused optimizer steps with empty lists; random ops given a
`torch.Generator`, which torch's meta kernels refuse), `optimizer_ops` and
`host_arguments` register `functional_kernel` instead.

The pointwise in-place ops on one tensor (`x.addcdiv_(a, b)`, `x.lerp_(y, w)`,
`x.clamp_(lo, hi)`, `x.mul_(y)`, ...) pay the same check: 3 to 80 times their functional
form's host time, mostly torch's Python meta kernels and reference implementations.
`checked_kernel` replaces it with the two checks it makes for these ops, in torch's
words: the result keeps `self`'s shape (no broadcasting of `self`), and its type casts to
`self`'s, and no two elements of `self` are one memory location on the CPU (a view with
a stride of 0, as `x.expand(3, 4)` makes: the engine gives views the CPU's strides).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import torch
from torch._prims_common.wrappers import _maybe_resize_out, _safe_copy_out

_FUNCTIONALIZE = torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize)


def unwrap(a):
    """The engine tensor inside a user tensor (pending view updates applied), for a tensor
    or a list of them; anything else as it is."""
    if isinstance(a, torch.Tensor) and torch._is_functional_tensor(a):
        torch._sync(a)
        return torch._from_functional_tensor(a)
    if isinstance(a, (list, tuple)):
        return [unwrap(x) for x in a]
    return a


def write_back(t: torch.Tensor, value: torch.Tensor) -> None:
    """Make the engine tensor `value` the new value of the user tensor `t`, as an in-place
    op on `t` does: its views see it, autograd counts a new version."""
    torch._functionalize_replace(t, value)
    torch._functionalize_commit_update(t)
    torch._functionalize_sync(t)


def _run_functional(functional, args: tuple, kwargs: dict):
    """`functional` on the engine tensors inside the user's tensors."""
    inner_args = [unwrap(a) for a in args]
    inner_kwargs = {k: unwrap(v) for k, v in kwargs.items()}
    with torch._C._ExcludeDispatchKeyGuard(_FUNCTIONALIZE):
        return functional(*inner_args, **inner_kwargs)


def functional_kernel(inplace, functional,
                      unchanged: Callable[[dict], Collection[str]] | None = None):
    """The kernel of the in-place op `inplace` from its functional form `functional`,
    which returns one result (a tensor, or a list for a foreach op) per argument that
    `inplace` writes, in schema order. Returns what `inplace` returns: the written tensor
    for an op that writes one tensor (`exponential_`), nothing for list arguments
    (`_foreach_mul_`, `_fused_adamw_`). `unchanged(kwargs)` names the written arguments
    that a call leaves as they are, which are not written back (their results would
    only make the step's program output copies of them)."""
    arguments = inplace._schema.arguments
    written = [i for i, a in enumerate(arguments)
               if a.alias_info is not None and a.alias_info.is_write]
    single = len(written) == 1

    def kernel(*args, **kwargs):
        for index in written:
            if isinstance(args[index], torch.Tensor):
                check_no_internal_overlap(args[index])
        outs = _run_functional(functional, args, kwargs)
        kept = unchanged(kwargs) if unchanged is not None else ()
        for index, results in zip(written, (outs,) if single else outs, strict=True):
            if arguments[index].name in kept:
                continue
            target = args[index]
            if isinstance(target, torch.Tensor):
                write_back(target, results)
            else:
                for t, out in zip(target, results, strict=True):
                    write_back(t, out)
        if single and isinstance(args[written[0]], torch.Tensor):
            return args[written[0]]
        return None

    return kernel


def checked_kernel(functional, original: torch._C._SafeKernelFunction):
    """The kernel of a pointwise in-place op that writes its first argument, `self`, from
    its functional form. A call whose `self` is not a functional tensor goes to PyTorch's
    kernel, `original`, after `check_devices`."""

    def kernel(keyset, self, *args, **kwargs):
        if not torch._is_functional_tensor(self):
            check_devices(self, args, kwargs)
            return original.call_boxed(keyset, self, *args, **kwargs)
        check_no_internal_overlap(self)
        out = _run_functional(functional, (self, *args), kwargs)
        if out.shape != self.shape:
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the "
                               f"broadcast shape {list(out.shape)}")
        check_cast(out.dtype, self.dtype)
        write_back(self, out)  # cast to `self`'s dtype by functionalization
        return self

    return kernel


def check_no_internal_overlap(t: torch.Tensor) -> None:
    """Refuse to write to `t`, an XLA tensor, if two of its elements are one memory
    location on the CPU (a stride of 0 over a dimension longer than 1, as `expand` makes).
    Other devices' tensors reaching these kernels (AOTAutograd's on the CPU) are left to
    PyTorch.

    The CPU refuses most such writes with the error below. It allows a few that write one
    value to every location (`fill_`, `zero_`, `index_fill_`, a masked assignment); on
    the device those would be wrong, since functionalization writes an expanded view back
    by adding each element's change to the location it shares: `fill_(5)` on three rows
    expanded from a tensor of ones gives 13. So the device refuses them too, and says so."""
    stride = t.stride()
    if (0 in stride and t.device.type == "xla"
            and any(s == 0 and n > 1 for n, s in zip(t.shape, stride, strict=True))):
        raise RuntimeError(
            "unsupported operation: more than one element of the written-to tensor refers "
            "to a single memory location. Please clone() the tensor before performing the "
            "operation. (On the XLA device this holds for every in-place op, fill_ and "
            "zero_ included: write to the tensor that was expanded, or to a clone().)")


def guarded_kernel(original: torch._C._SafeKernelFunction):
    """PyTorch's functionalization kernel of an in-place op, `original`, after the checks it
    lacks for this device: `check_no_internal_overlap` (PyTorch's checks on meta tensors let
    an overlapping `self` through), and `check_devices` on a `self` that is not functional."""

    def kernel(keyset, self, *args, **kwargs):
        if not torch._is_functional_tensor(self):
            check_devices(self, args, kwargs)
        else:
            check_no_internal_overlap(self)
        return original.call_boxed(keyset, self, *args, **kwargs)

    return kernel


def out_kernel(op: torch._ops.OpOverload, original: torch._C._SafeKernelFunction,
               outs: tuple[str, ...], numbers: tuple | None = None):
    """PyTorch's functionalization kernel of the `out=` variant `op`, `original`, after the
    checks it lacks, in the words of PyTorch's own checks on the CPU and CUDA:

    - an `out` tensor off the device given XLA inputs is refused (PyTorch's kernel fails
      with an internal assert);
    - an `out` tensor on the device given inputs on the CPU only: a 0-dim CPU tensor
      (a scalar) moves to the device, any other is refused. PyTorch's kernel would run
      the op on the CPU and put the CPU result inside the XLA tensor, which would from
      then on compute on the CPU, outside every graph;
    - the call on meta tensors (`_check_on_meta`): PyTorch's kernel converts the result
      to `out`'s dtype whatever it is, where the CPU refuses a result type that does not
      cast to it (`torch.sin(x, out=long_tensor)`) and checks shapes.

    `numbers`, for the ops whose tensor arguments may be Python numbers (`torch.add(x, 1,
    out=y)`; `mul.out`, `div.out`, ...): (the functional overload, the kernel of the
    variant taking `other` as a Scalar or None, the positions of the tensor arguments).
    PyTorch's boxed kernel refuses a number handed back from Python; a number `other`
    goes to the Scalar variant's kernel instead, any other to the functional op
    (`_written_from`)."""

    def kernel(keyset, *args, **kwargs):
        written = [kwargs.get(name) for name in outs]
        inputs = (*args, *(v for k, v in kwargs.items() if k not in outs))
        device = _xla_device_among(inputs)
        for out in written:
            if not isinstance(out, torch.Tensor):
                continue
            if not torch._is_functional_tensor(out):
                if device is not None:
                    raise RuntimeError(f"Expected out tensor to have device {device}, but "
                                       f"got {out.device} instead")
            elif out.device.type == "xla":
                if device is None:
                    args, kwargs = _scalars_to(out.device, args, kwargs, outs)
                _check_on_meta(op, *_by_schema(op, args, kwargs))
                break
        if numbers is not None:
            functional, scalar_variant, tensors = numbers
            given = [i for i in tensors if not isinstance(args[i], torch.Tensor)]
            if given == [1] and scalar_variant is not None:
                return scalar_variant.call_boxed(keyset, *args, **kwargs)
            if given:
                return _written_from(functional, *_by_schema(op, args, kwargs), outs[0])
        return original.call_boxed(keyset, *args, **kwargs)

    return kernel


def _by_schema(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A kernel's arguments (its keyword-only ones may come positionally) as a Python call
    of `op` takes them: keyword-only arguments by name."""
    schema = op._schema.arguments
    positional = [a for a, arg in zip(args, schema, strict=False) if not arg.kwarg_only]
    named = {arg.name: a for a, arg in zip(args, schema, strict=False) if arg.kwarg_only}
    return tuple(positional), {**named, **kwargs}


_CHECKED: set = set()  # the calls `_check_on_meta` passed, as `_call_key` gives them


def _call_key(a):
    if isinstance(a, torch.Tensor):
        return (tuple(a.shape), a.stride(), a.dtype)
    if isinstance(a, (list, tuple)):
        return tuple(_call_key(t) for t in a)
    if isinstance(a, dict):
        return tuple((k, _call_key(v)) for k, v in a.items())
    return (type(a), a)


def _check_on_meta(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> None:
    """Run `op` on meta tensors of the arguments' shapes, strides and dtypes, for its
    checks (result type against `out`'s dtype, shapes), which raise in PyTorch's words.
    An op without a meta kernel is not checked. A call that passed is remembered by
    those properties and its other arguments, and not run again (many meta kernels are
    Python: 40 to 130 us per call)."""
    try:
        key = (op, _call_key(args), _call_key(kwargs))
        if key in _CHECKED:
            return
    except TypeError:  # an unhashable argument: checked every time
        key = None

    def meta(a):
        if isinstance(a, torch.Tensor):
            return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
        if isinstance(a, (list, tuple)):
            return type(a)(meta(t) for t in a)
        return a

    try:
        op(*[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()})
    except (NotImplementedError, TypeError):  # no meta kernel, or one that cannot take
        pass                                   # the call (add.Scalar_out's, in torch 2.13)
    if key is not None:
        if len(_CHECKED) >= 10_000:
            _CHECKED.clear()
        _CHECKED.add(key)


def _scalars_to(device: torch.device, args: tuple, kwargs: dict, outs: tuple[str, ...]):
    """`args` and `kwargs` of an op writing to `device` with no XLA input: CPU scalars
    (0-dim tensors) moved there; any other CPU tensor refused."""

    def moved(a):
        if isinstance(a, (list, tuple)):
            return type(a)(moved(t) for t in a)
        if not isinstance(a, torch.Tensor) or a.device == device:
            return a
        if a.dim() == 0:
            return a.to(device)
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two "
            f"devices, {device} and {a.device}! An `out=` tensor on {device} was given an "
            f"input on {a.device} (shape {tuple(a.shape)}): move the inputs with "
            f"`.to('{device.type}')`, or pass an `out` tensor on {a.device}.")

    return (tuple(moved(a) for a in args),
            {k: v if k in outs else moved(v) for k, v in kwargs.items()})


def _written_from(functional, args: tuple, kwargs: dict, out_name: str) -> torch.Tensor:
    """An `out=` op whose `self` is a Python number, as PyTorch's functionalization kernel
    runs it (minus its check on meta tensors): the functional op, which wraps the number
    as PyTorch does, then its result written into `out` (cast to its dtype, resized)."""
    out = kwargs[out_name]
    result = _run_functional(functional, args,
                             {k: v for k, v in kwargs.items() if k != out_name})
    check_cast(result.dtype, out.dtype)
    if not torch._is_functional_tensor(out):  # a plain tensor (no functional input)
        return out.resize_(result.shape).copy_(result)
    write_back(out, result)
    return out


def _xla_device_among(args) -> torch.device | None:
    for a in args:
        for t in a if isinstance(a, (list, tuple)) else (a,):
            if isinstance(t, torch.Tensor) and t.device.type == "xla":
                return t.device
    return None


def check_devices(self: torch.Tensor, args: tuple, kwargs: dict) -> None:
    """Refuse an in-place op writing to a tensor off the device, `self`, that reads an XLA
    tensor (`cpu_tensor.add_(xla_tensor)`); PyTorch's kernel fails with an internal assert
    ("mutating a non-functional tensor with a functional tensor is not allowed")."""
    device = _xla_device_among((*args, *kwargs.values()))
    if device is not None:
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two "
            f"devices, {device} and {self.device}! An in-place op writes to a tensor on "
            f"{self.device} (shape {tuple(self.shape)}) and reads a tensor on {device}: move "
            f"the operand with `.to('{self.device.type}')`, or write to a tensor on {device}.")


def check_cast(result: torch.dtype, target: torch.dtype) -> None:
    """Refuse writing a result of type `result` into a tensor of type `target` where the
    CPU refuses it, in its words."""
    if result != target and not torch.can_cast(result, target):
        raise RuntimeError(f"result type {_type_name(result)} can't be cast to the desired "
                           f"output type {_type_name(target)}")


def _type_name(dtype: torch.dtype) -> str:
    """torch's name of a dtype in its casting errors: `Float`, `Long`, `ComplexFloat`."""
    return torch.empty((), dtype=dtype).type().rpartition(".")[2].removesuffix("Tensor")


# (in-place overload, functional overload) of the pointwise ops `checked_kernel` takes.
POINTWISE_OPS = [
    (f"{name}_.{overload}" if overload else f"{name}_",
     f"{name}.{overload}" if overload else name)
    for name, overloads in {
        "add": ("Tensor", "Scalar"),
        "sub": ("Tensor", "Scalar"),
        "mul": ("Tensor", "Scalar"),
        "div": ("Tensor", "Scalar", "Tensor_mode", "Scalar_mode"),
        "addcdiv": ("",),
        "addcmul": ("",),
        "lerp": ("Scalar", "Tensor"),
        "clamp": ("", "Tensor"),
        "clamp_min": ("", "Tensor"),
        "clamp_max": ("", "Tensor"),
        "masked_fill": ("Scalar", "Tensor"),
        "sqrt": ("",), "rsqrt": ("",), "exp": ("",), "log": ("",), "neg": ("",),
        "abs": ("",), "reciprocal": ("",), "sigmoid": ("",), "tanh": ("",),
    }.items()
    for overload in overloads
] + [("pow_.Scalar", "pow.Tensor_Scalar"), ("pow_.Tensor", "pow.Tensor_Tensor")]


def overload(name: str):
    """The ATen overload named `name` (`"add_.Tensor"`; no dot: `.default`)."""
    packet, _, variant = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), variant or "default")


# In-place ops that change a tensor's metadata or storage, not its elements.
_NOT_ELEMENT_WRITES = ("as_strided_", "detach_", "squeeze_", "unsqueeze_", "swapaxes_",
                       "swapdims_", "t_", "transpose_", "requires_grad_", "set_", "resize",
                       "_resize", "sparse_", "_coalesced_", "copy_sparse", "_mkldnn")


def guarded_ops(skip: Collection[str]) -> tuple[list[str], list[tuple[str, tuple[str, ...]]]]:
    """The ATen overloads with a functionalization kernel of PyTorch's that get ours:

    - the in-place ops ("relu_", "fill_.Scalar", ...) writing the elements of their first
      argument alone;
    - the `out=` variants, each with the names of the arguments it writes;

    less those named in `skip` and the in-place ops whose tensor arguments may be Python
    numbers (add_, mul_, ...: PyTorch's boxed kernel would refuse the number handed
    back; `out_kernel` handles the numbers of the `out=` variants).
    """
    in_place, outs = [], []
    for full in torch._C._dispatch_get_all_op_names():
        name = full.removeprefix("aten::")
        packet = name.partition(".")[0]
        if (name == full or name in skip or packet.startswith(_NOT_ELEMENT_WRITES)
                or not torch._C._dispatch_has_kernel_for_dispatch_key(full, "Functionalize")):
            continue
        arguments = overload(name)._schema.arguments
        writes = [a.alias_info is not None and a.alias_info.is_write for a in arguments]
        if not any(writes):
            continue
        if writes[0]:
            if (str(arguments[0].type) == "Tensor" and not any(writes[1:])
                    and packet.endswith("_") and not packet.endswith("__")
                    and not torch._C._should_allow_numbers_as_tensors(packet)):
                in_place.append(name)
        elif all(a.kwarg_only for a, w in zip(arguments, writes, strict=True) if w):
            outs.append((name, tuple(a.name for a, w in zip(arguments, writes, strict=True)
                                     if w)))
    return in_place, outs


def register(library: torch.library.Library, skip: Collection[str]) -> None:
    """Register `checked_kernel` for the pointwise ops, `guarded_kernel` for the other
    in-place ops on one tensor and `out_kernel` for the `out=` variants, except those in
    `skip` (registered elsewhere)."""
    for inplace, functional in POINTWISE_OPS:
        original = torch.library.get_kernel(f"aten::{inplace}", "Functionalize")
        library.impl(inplace, checked_kernel(overload(functional), original),
                     "Functionalize", with_keyset=True)
    in_place, outs = guarded_ops({inplace for inplace, _ in POINTWISE_OPS} | set(skip))
    for name in in_place:
        original = torch.library.get_kernel(f"aten::{name}", "Functionalize")
        library.impl(name, guarded_kernel(original), "Functionalize", with_keyset=True)
    for name, functional in UNKERNELED.items():
        library.impl(name, functional_kernel(overload(name), functional), "Functionalize")
    for name, functional in REBINDING_OUTS.items():
        library.impl(name, written_out_kernel(overload(name), overload(functional)),
                     "AutogradPrivateUse1")
    originals = {name: torch.library.get_kernel(f"aten::{name}", "Functionalize")
                 for name, _ in outs}
    for name, written in outs:
        library.impl(name, out_kernel(overload(name), originals[name], written,
                                      _numbers(name, originals)),
                     "Functionalize", with_keyset=True)


# In-place ops that PyTorch gives no functionalization kernel (its fallback refuses them:
# "Found a custom (non-ATen) operator whose output has alias annotations"), each with its
# functional form taking the in-place op's arguments.
UNKERNELED = {
    "polygamma_": lambda self, n: torch.ops.aten.polygamma.default(n, self),
}


# Composite `out=` kernels of PyTorch's that, given tensors it counts as subclass-like
# (every XLA tensor: a functional wrapper), compute a new tensor and rebind their `out`
# reference to it instead of writing into `out`, which kept its old value
# (`torch.linalg.matrix_rank(a, out=r)`): each by name, with its functional form.
REBINDING_OUTS = {
    "linalg_matrix_rank.out": "linalg_matrix_rank.default",
    "linalg_matrix_rank.out_tol_tensor": "linalg_matrix_rank.tol_tensor",
    "linalg_matrix_rank.atol_rtol_tensor_out": "linalg_matrix_rank.atol_rtol_tensor",
    "linalg_matrix_rank.atol_rtol_float_out": "linalg_matrix_rank.atol_rtol_float",
}


def written_out_kernel(op: torch._ops.OpOverload, functional: torch._ops.OpOverload):
    """The kernel of the `out=` variant `op` from its functional form: the result
    written into `out` (resized as `out=` resizes, cast where it casts safely)."""

    def kernel(*args, **kwargs):
        args, kwargs = _by_schema(op, args, kwargs)
        out = kwargs.pop("out")
        result = functional(*args, **kwargs)
        _maybe_resize_out(out, result.shape)
        return _safe_copy_out(copy_from=result, copy_to=out, exact_dtype=False)

    return kernel


# The functional form of each `out=` variant whose tensor arguments may be Python numbers,
# and its variant taking `other` as a Scalar (whose kernel runs a number `other`).
_NUMBER_FORMS = {
    "add.out": ("add.Tensor", "add.Scalar_out"),
    "add.Scalar_out": ("add.Scalar", None),
    "sub.out": ("sub.Tensor", "sub.Scalar_out"),
    "sub.Scalar_out": ("sub.Scalar", None),
    "mul.out": ("mul.Tensor", "mul.Scalar_out"),
    "mul.Scalar_out": ("mul.Scalar", None),
    "div.out": ("div.Tensor", "div.Scalar_out"),
    "div.out_mode": ("div.Tensor_mode", "div.Scalar_mode_out"),
    "div.Scalar_out": ("div.Scalar", None),
    "div.Scalar_mode_out": ("div.Scalar_mode", None),
    "floor_divide.out": ("floor_divide.default", "floor_divide.Scalar_out"),
    "floor_divide.Scalar_out": ("floor_divide.Scalar", None),
    "copy.out": ("copy.default", None),
    "_to_copy.out": ("_to_copy.default", None),
}


def _numbers(name: str, originals: dict) -> tuple | None:
    """`out_kernel`'s `numbers` for the `out=` variant `name`, or None: its tensors can
    only be tensors. `originals`: PyTorch's kernels of the `out=` variants, by name."""
    if not torch._C._should_allow_numbers_as_tensors(name.partition(".")[0]):
        return None
    functional, scalar_variant = _NUMBER_FORMS.get(name, (None, None))
    if functional is None:
        raise RuntimeError(f"aten::{name} may take Python numbers for tensors: give it its "
                           "functional form in in_place._NUMBER_FORMS")
    tensors = tuple(i for i, a in enumerate(overload(name)._schema.arguments)
                    if not a.kwarg_only and str(a.type) == "Tensor")
    variant = originals[scalar_variant] if scalar_variant is not None else None
    return overload(functional), variant, tensors
