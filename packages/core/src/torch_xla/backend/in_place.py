"""In-place ops run as their functional forms: kernels at the functionalization key that
call the functional op on the engine tensors inside the user's tensors, then write each
result back into the argument it replaces (`write_back`, which updates every view).

PyTorch's generated functionalization kernel does the same, but first re-checks the call
on meta tensors. Where that check is slow (the foreach ops' meta kernels are Python) or
wrong for us (fused optimizer steps with empty lists; random ops given a
`torch.Generator`, which torch's meta kernels refuse), `optimizer_ops` and
`host_arguments` register `functional_kernel` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import torch

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
        inner_args = [unwrap(a) for a in args]
        inner_kwargs = {k: unwrap(v) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_FUNCTIONALIZE):
            outs = functional(*inner_args, **inner_kwargs)
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
