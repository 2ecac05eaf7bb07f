"""Meta kernels torch lacks for ATen ops.

Fake tensors (dynamo's, AOTAutograd's) compute an op without a meta kernel by running its
real kernel on zero-filled tensors of the fake device. A device whose kernels are written
in Python, as ours are, has none there ("could not find kernel for aten.zero_.default at
dispatch key PrivateUse1"), so `torch.compile(backend='openxla')` stopped at such an op.
Each kernel here gives the output's shape and dtype only; it serves every device.

The engine infers the output shapes of every op it records the same way, on meta tensors;
an op it cannot infer runs on the CPU instead. So the fused optimizer steps, which have
lowerings (`lowering/ops/optim.py`), ran on the CPU at every step of `fused=True` SGD and
Adagrad, and of Adam and AdamW with a tensor learning rate, until they had meta kernels
here.
"""

from __future__ import annotations

import torch

from torch_xla.backend.optimizer_ops import FUSED_STEPS


def _fractional_max_pool3d_backward(grad_output, self, kernel_size, output_size, indices):
    """The gradient of the pooled input: its shape and dtype."""
    return self.new_empty(self.shape)


def _ctc_loss_backward(grad, log_probs, *rest, **options):
    """The gradient for the log-probabilities: their shape and dtype."""
    return log_probs.new_empty(log_probs.shape)


def _fused_step(op: torch._ops.OpOverload):
    """The meta kernel of a functional fused optimizer step: its outputs are its first list
    arguments (parameters, gradients, state), each as it came in."""
    count = len(op._schema.returns)

    def kernel(*lists, **options):
        return tuple([t.new_empty(t.shape) for t in group] for group in lists[:count])

    return kernel


def _name(op: torch._ops.OpOverload) -> str:
    """`op` as `torch.library` names an ATen overload ("_fused_sgd.tensor_lr")."""
    base = op._schema.name.removeprefix("aten::")
    return f"{base}.{op._overloadname}" if op._overloadname != "default" else base


_FUSED_STEPS = [getattr(getattr(torch.ops.aten, f"_fused_{name}"), overload)
                for name in FUSED_STEPS
                for overload in ("default", "tensor_lr")]

# ATen op (overload) -> meta kernel, for the ops torch 2.13 has none for.
KERNELS = {
    "fractional_max_pool3d_backward": _fractional_max_pool3d_backward,
    "_ctc_loss_backward": _ctc_loss_backward,
    "_ctc_loss_backward.Tensor": _ctc_loss_backward,
    **{_name(op): _fused_step(op) for op in _FUSED_STEPS},
}


def register(library: torch.library.Library) -> None:
    for name, kernel in KERNELS.items():
        if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "Meta"):
            library.impl(name, kernel, "Meta")
