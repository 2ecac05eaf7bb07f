"""Functionalization kernels for the in-place ops optimizers run: the `_foreach_*` updates
and the fused steps (`_fused_adam_`, `_fused_adamw_`, `_fused_sgd_`, `_fused_adagrad_`).

Each kernel (`in_place.functional_kernel`) does what PyTorch's generated
functionalization kernel does, minus two of its behaviours: unwrap the arguments, run
the functional op, write each result back into the argument it replaces.

- PyTorch's kernel first re-runs every in-place foreach op on meta tensors to validate
  it, and for foreach ops those meta kernels are Python (`torch._refs`), which costs
  about 40% of an AdamW step's tracing time. Shape errors still surface here, raised by
  the functional op itself.
- PyTorch's kernel for a fused step counts an empty list (`max_exp_avg_sqs` without
  amsgrad, `momentum_buffer_list` without momentum) as "not functional" and so stops a
  step over functional tensors with an internal assert ("mutating a non-functional
  tensor with a functional tensor"). `torch.optim.Adam(fused=True)` accepts the xla
  device (PyTorch lists every PrivateUse1 backend as able to run fused steps), so
  without these kernels it could never run without amsgrad.
"""

from __future__ import annotations

import torch

from torch_xla.backend import in_place

# (in-place overload, functional overload) pairs used by SGD, Adam, AdamW and Adagrad.
FOREACH_OPS = [
    (f"_foreach_{name}_.{overload}", f"_foreach_{name}.{overload}")
    for name, overloads in {
        "add": ("Scalar", "List", "ScalarList", "Tensor"),
        "sub": ("Scalar", "List", "ScalarList"),
        "mul": ("Scalar", "List", "ScalarList", "Tensor"),
        "div": ("Scalar", "List", "ScalarList", "Tensor"),
        "addcdiv": ("Scalar", "ScalarList", "Tensor"),
        "addcmul": ("Scalar", "ScalarList", "Tensor"),
        "lerp": ("Scalar", "List", "ScalarList"),
        "maximum": ("List",),
    }.items()
    for overload in overloads
] + [(f"_foreach_{name}_", f"_foreach_{name}") for name in ("sqrt", "neg", "zero", "reciprocal")]

# The fused steps whose functional forms have lowerings (`lowering/ops/optim.py`), each
# with a float `lr` (default) and a tensor one (`tensor_lr`).
FUSED_STEPS = ("adam", "adamw", "sgd", "adagrad")
FUSED_OPS = [
    pair for name in FUSED_STEPS
    for pair in ((f"_fused_{name}_", f"_fused_{name}"),
                 (f"_fused_{name}_.tensor_lr", f"_fused_{name}.tensor_lr"))
]


def _grads_unless_unscaled(kwargs: dict) -> tuple[str, ...]:
    """A fused step writes its gradients only to unscale them by `grad_scale` (a
    GradScaler's): without one they stay as they are."""
    return ("grads",) if kwargs.get("grad_scale") is None else ()


def register(library: torch.library.Library) -> None:
    overload = in_place.overload
    for inplace, functional in FOREACH_OPS:
        library.impl(inplace,
                     in_place.functional_kernel(overload(inplace), overload(functional)),
                     "Functionalize")
    for inplace, functional in FUSED_OPS:
        library.impl(inplace,
                     in_place.functional_kernel(overload(inplace), overload(functional),
                                                unchanged=_grads_unless_unscaled),
                     "Functionalize")
