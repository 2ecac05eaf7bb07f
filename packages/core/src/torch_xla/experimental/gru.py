"""`GRU`: `torch.nn.GRU` whose time loop is one XLA While loop.

PyTorch/XLA's `torch_xla.experimental.gru.GRU`. Lazy tracing unrolls `torch.nn.GRU` on
XLA tensors: a sequence of 2048 steps puts 2048 copies of the cell into the program.
This subclass keeps torch's constructor, parameters (names, shapes, initialisation,
`state_dict`) and call signature, and runs each layer's recurrence with
`torch_xla.experimental.scan.scan`, so the program holds the cell once whatever the
sequence length, forward and backward.

Per layer, the input projection `x_t W_ih^T + b_ih` of every step is one matmul over the
whole sequence, outside the loop; only the part that depends on the previous hidden state
(`h_{t-1} W_hh^T + b_hh` and the gates) is scanned.

Supported: unidirectional, any number of layers, `bias`, `batch_first`, `dropout` between
layers, an initial hidden state, unbatched (2-D) input. Not supported on XLA tensors:
`PackedSequence` input (`NotImplementedError`). `bidirectional=True` builds a plain
`torch.nn.GRU` instead, with a warning (see `GRU`). On tensors of another device (the CPU)
the module runs torch's own GRU.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from torch_xla.experimental.scan import scan

__all__ = ["GRU"]

_TORCH_GRU = nn.GRU  # torch's class, kept in case torch.nn.GRU is replaced later
_BIDIRECTIONAL_POSITION = 6  # in GRU(input_size, hidden_size, num_layers, bias,
#                              batch_first, dropout, bidirectional, ...)


class GRU(_TORCH_GRU):
    """`torch.nn.GRU` (same arguments, parameters, inputs and outputs) whose time loop runs
    as one XLA While loop on XLA tensors; see the module.

    `GRU(..., bidirectional=True)` returns a plain `torch.nn.GRU` with a `UserWarning`:
    the scanned loop is unidirectional, and the module stays usable (its time loop is then
    unrolled). For a scanned bidirectional GRU, run two of these GRUs, the second on the
    input flipped along time, and concatenate their outputs. Turn the warning into an error
    with `warnings.simplefilter("error", UserWarning)` to make sure no model falls back.
    """

    def __new__(cls, *args, **kwargs):
        if _wants_bidirectional(args, kwargs):
            warnings.warn(
                "torch_xla.experimental.gru.GRU scans unidirectional GRUs only; "
                "bidirectional=True returns a plain torch.nn.GRU, whose time loop lazy "
                "tracing unrolls on XLA (one copy of the cell per step). For a scanned "
                "bidirectional GRU, run two unidirectional GRUs, one on the input flipped "
                "along time, and concatenate their outputs.", UserWarning, stacklevel=2)
            return _TORCH_GRU(*args, **kwargs)
        return super().__new__(cls)

    # No type hints: the signature reads as torch.nn.GRU.forward's, for drop-in use.
    def forward(self, input, hx=None):
        """`torch.nn.GRU.forward`: `input` (L, N, H_in), (N, L, H_in) with `batch_first`,
        or unbatched (L, H_in); `hx` (num_layers, N, H) or (num_layers, H), zeros if None.
        Returns `(output, h_n)` shaped as torch's."""
        if _device_type(input) != "xla":
            return super().forward(input, hx)
        _check_supported(self, input)
        self._update_flat_weights()
        batched = _batched(input, hx)
        x = input if batched else input.unsqueeze(0 if self.batch_first else 1)
        h0 = _initial_hidden(self, x, hx, batched)
        self.check_forward_args(x, h0, None)
        output, h_n = _layers(self, _swap_if(self.batch_first, x), h0)
        if not batched:
            return output.squeeze(1), h_n.squeeze(1)
        return _swap_if(self.batch_first, output), h_n


def _wants_bidirectional(args: tuple, kwargs: dict) -> bool:
    if "bidirectional" in kwargs:
        return bool(kwargs["bidirectional"])
    return len(args) > _BIDIRECTIONAL_POSITION and bool(args[_BIDIRECTIONAL_POSITION])


def _device_type(input: torch.Tensor | PackedSequence) -> str:
    return (input.data if isinstance(input, PackedSequence) else input).device.type


def _check_supported(gru: GRU, input: torch.Tensor | PackedSequence) -> None:
    if isinstance(input, PackedSequence):
        raise NotImplementedError(
            "torch_xla.experimental.gru.GRU: PackedSequence input is not supported on XLA "
            "(its steps have different batch sizes, a loop needs one shape). Pass the padded "
            "tensor (torch.nn.utils.rnn.pad_packed_sequence) and mask the padded steps.")
    if gru.bidirectional:
        raise NotImplementedError(
            "torch_xla.experimental.gru.GRU: bidirectional is True on this module, but the "
            "scanned GRU is unidirectional. Build it with GRU(..., bidirectional=True), "
            "which returns a torch.nn.GRU, or run two unidirectional GRUs (one on the input "
            "flipped along time) and concatenate their outputs.")
    if input.dim() not in (2, 3):
        raise ValueError(f"GRU: Expected input to be 2D or 3D, got {input.dim()}D instead")


def _batched(input: torch.Tensor, hx: torch.Tensor | None) -> bool:
    """Whether `input` has a batch dimension; `hx` must agree (torch's errors)."""
    batched = input.dim() == 3
    want = 3 if batched else 2
    if hx is not None and hx.dim() != want:
        kind = "batched 3-D" if batched else "unbatched 2-D"
        raise RuntimeError(f"For {kind} input, hx should also be {want}-D but got "
                           f"{hx.dim()}-D tensor")
    return batched


def _initial_hidden(gru: GRU, x: torch.Tensor, hx: torch.Tensor | None,
                    batched: bool) -> torch.Tensor:
    """`hx` with a batch dimension, or zeros for batched `x`."""
    if hx is None:
        batch = x.size(0 if gru.batch_first else 1)
        return x.new_zeros(gru.num_layers, batch, gru.hidden_size)
    return hx if batched else hx.unsqueeze(1)


def _swap_if(batch_first: bool, x: torch.Tensor) -> torch.Tensor:
    """(N, L, ...) <-> (L, N, ...) when `batch_first`: the layers run time-major."""
    return x.transpose(0, 1) if batch_first else x


def _layers(gru: GRU, x: torch.Tensor, h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The stacked layers over time-major `x`: (the last layer's output, h_n)."""
    finals = []
    for layer in range(gru.num_layers):
        if layer > 0 and gru.dropout > 0:
            x = F.dropout(x, p=gru.dropout, training=gru.training)
        x, h_last = _layer(x, h0[layer], *_weights(gru, layer))
        finals.append(h_last)
    return x, torch.stack(finals)


def _weights(gru: GRU, layer: int) -> tuple[torch.Tensor | None, ...]:
    """(w_ih, w_hh, b_ih, b_hh) of `layer`; the biases None without `bias`."""
    names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if gru.bias else [])
    found = [getattr(gru, f"{name}_l{layer}") for name in names]
    return tuple(found + [None] * (4 - len(found)))


def _layer(x: torch.Tensor, h0: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor,
           b_ih: torch.Tensor | None, b_hh: torch.Tensor | None
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer over time-major `x`: (its output at every step, its last hidden state)."""
    input_gates = F.linear(x, w_ih, b_ih)  # every step's at once: (L, N, 3H)
    carry = {"h": h0, "w_hh": w_hh}
    if b_hh is not None:
        carry["b_hh"] = b_hh
    final, output = scan(_step, carry, input_gates)
    return output, final["h"]


# At module level so that scan's cache of traced steps (kept per function) finds it.
def _step(carry: dict[str, torch.Tensor], input_gates: torch.Tensor
          ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """One GRU step (torch's gate order r, z, n) given this step's input projection."""
    h = carry["h"]
    hidden_gates = F.linear(h, carry["w_hh"], carry.get("b_hh"))
    r_x, z_x, n_x = input_gates.chunk(3, dim=-1)
    r_h, z_h, n_h = hidden_gates.chunk(3, dim=-1)
    reset = torch.sigmoid(r_x + r_h)
    update = torch.sigmoid(z_x + z_h)
    new = torch.tanh(n_x + reset * n_h)
    h = new + update * (h - new)  # (1 - z) n + z h, in torch's operation order
    return {**carry, "h": h}, h
