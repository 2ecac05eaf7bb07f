"""ATen ops whose contract keeps some tensors on the host whatever the device of the
others, taken on the xla device before functionalization (which would wrap a host tensor
like any output of an op on an XLA tensor) and before torch's composite kernels (which
would mix the host tensors into device ops): at their autograd key, and at the
functionalization key for calls that skip autograd (`torch.inference_mode`), where
other devices keep torch's kernel.

- `_pack_padded_sequence` (`nn.utils.rnn.pack_padded_sequence`) takes the lengths as a
  CPU tensor and returns the step sizes (`batch_sizes`) as a CPU tensor, which `nn.LSTM`
  and `pad_packed_sequence` read on the host; a wrapped CPU tensor has no host data for
  them. The step sizes are computed on the host from the lengths, and the packed data is
  those rows of each step, concatenated with ordinary (recorded, differentiable) ops.
  PyTorch/XLA runs the op on the CPU.
- `ctc_loss` with length tensors: on the CPU, as CUDA code passes them, they become the
  integer lists of its `IntList` form (what torch does for plain tensors); on the
  device, torch's composite kernel as before.
- `exponential_`, `geometric_`, `cauchy_` and `log_normal_` given a `torch.Generator`
  (host state): torch's functionalization kernel first checks the call on meta tensors,
  whose kernels for these ops (`torch._refs`) refuse any generator ("generator is not
  supported in refs"). Ours (`in_place.functional_kernel`) runs the functional op on the
  unwrapped tensor, which the engine draws on the CPU from the generator, as it does
  every random op given one (as PyTorch/XLA does), and writes the result back.
"""

from __future__ import annotations

import torch

from torch_xla.backend import in_place


def pack_padded_sequence(data: torch.Tensor, lengths: torch.Tensor, batch_first: bool):
    if lengths.device.type != "cpu" or lengths.dim() != 1:
        raise RuntimeError("pack_padded_sequence: `lengths` must be a 1-D CPU int64 tensor, "
                           f"got {tuple(lengths.shape)} on {lengths.device}")
    if batch_first:
        data = data.transpose(0, 1)
    counts = [int(n) for n in lengths.tolist()]
    if not counts:
        raise RuntimeError("pack_padded_sequence: cannot pack an empty batch")
    if len(counts) != data.shape[1]:
        raise RuntimeError(f"pack_padded_sequence: {len(counts)} lengths for a batch of "
                           f"{data.shape[1]}")
    if min(counts) <= 0:
        raise RuntimeError("pack_padded_sequence: every length must be positive (a sequence "
                           "of length 0 cannot be packed)")
    if counts != sorted(counts, reverse=True):
        raise RuntimeError("pack_padded_sequence: `lengths` must be sorted in decreasing "
                           "order, or pass enforce_sorted=False")
    if counts[0] > data.shape[0]:
        raise RuntimeError(f"pack_padded_sequence: a length of {counts[0]} is longer than "
                           f"the {data.shape[0]} steps of the input")
    sizes = [sum(n > step for n in counts) for step in range(counts[0])]
    packed = torch.cat([data[step, :size] for step, size in enumerate(sizes)])
    return packed, torch.tensor(sizes, dtype=torch.int64)


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1,
             zero_infinity=False):
    if input_lengths.device.type == "cpu" and target_lengths.device.type == "cpu":
        return torch.ops.aten.ctc_loss.IntList(log_probs, targets, input_lengths.tolist(),
                                               target_lengths.tolist(), blank, reduction,
                                               zero_infinity)
    return torch.ops.aten.ctc_loss.Tensor.decompose(log_probs, targets, input_lengths,
                                                    target_lengths, blank, reduction,
                                                    zero_infinity)


_RANDOM_IN_PLACE = ("exponential", "geometric", "cauchy", "log_normal")
IN_PLACE = tuple(f"{name}_" for name in _RANDOM_IN_PLACE)  # given functionalization kernels


def _functionalize_kernel(name: str, impl):
    """`impl` for XLA tensors at the functionalization key; torch's kernel for others."""
    original = torch.library.get_kernel(f"aten::{name}", "Functionalize")

    def kernel(keyset, *args, **kwargs):
        if args[0].device.type != "xla":
            return original.call_boxed(keyset, *args, **kwargs)
        return impl(*args, **kwargs)

    return kernel


def register(library: torch.library.Library) -> None:
    for name, impl in (("_pack_padded_sequence", pack_padded_sequence),
                       ("ctc_loss.Tensor", ctc_loss)):
        library.impl(name, impl, "AutogradPrivateUse1")
        library.impl(name, _functionalize_kernel(name, impl), "Functionalize",
                     with_keyset=True)
    for name in _RANDOM_IN_PLACE:
        impl = in_place.functional_kernel(getattr(torch.ops.aten, f"{name}_").default,
                                          getattr(torch.ops.aten, name).default)
        library.impl(f"{name}_", _functionalize_kernel(f"{name}_", impl), "Functionalize",
                     with_keyset=True)
