"""PyTorch/XLA's `torch_xla.experimental.xla_quantized_matmul`: weight-only quantized matmul.

    torch.ops.xla.quantized_matmul(x, w, scale, zero_point=None, block_size=-1,
                                   int4_weight=False, quantize_activation=False)

multiplies the activation `x` [..., in_features] by the weight `w * scale - zero_point`
while `w` stays int8 (or int4 in an int8 container) in memory:

- per-channel (block_size=-1): w [out, in], scale and zero_point [out];
- blockwise (block_size=b > 0): w [in/b, b, out], scale and zero_point [in/b, out];
- int4_weight=True: w holds values in [-8, 7], which the program converts to 4 bits;
- quantize_activation=True (per-channel only): each row of x is quantized to int8 too
  (symmetric, absolute maximum), so the dot is integer with int32 accumulation.

The result has torch's promoted dtype of x and scale; autograd gives x its gradient
(PyTorch/XLA's op has none). `XlaQuantizedLinear` is the module around the op
(`load_quantized_weight`, then call it); `pack_4bit` and `unpack_4bit` store two 4-bit
values per int8 byte and back.

On XLA tensors the op is one node (`xb.call_jax` of `torch_xla.lowering.quantized_matmul`)
whose HLO multiplies the activation by the integer weight in one mixed-dtype dot
(`dot(bf16, s8)`); on any other tensor (CPU, meta) the PyTorch composition below
computes it, and is the numerical reference. Importing this module imports jax.
"""

from __future__ import annotations

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 (see below)
import torch.nn.functional as F

import torch_xla.core.xla_builder as xb
from torch_xla.core.xla_model import XLA_LIB
from torch_xla.lowering import quantized_matmul as lowering

# `torch.ops.quantized_decomposed` (quantize_per_channel & co.) is how weights are quantized
# for this op; torch registers those ops only when that module is imported, which
# PyTorch/XLA's programs find done by `import torch_xla` (ours does not pay for it).

# The schema is PyTorch/XLA's, so programs and exported graphs that name the op keep working.
XLA_LIB.define(
    "quantized_matmul(Tensor x, Tensor w, Tensor scale, Tensor? zero_point=None, "
    "int? block_size=-1, bool? int4_weight=False, bool? quantize_activation=False) -> Tensor")

PER_CHANNEL = -1  # block_size of per-channel quantization
INT4_RANGE = (-8, 7)


# --- argument checks, shared by every kernel ---------------------------------------------


def _check(x: torch.Tensor, w: torch.Tensor, scaler: torch.Tensor,
           zero_point: torch.Tensor | None, block_size: int,
           quantize_activation: bool) -> None:
    if not x.is_floating_point():
        raise TypeError(f"quantized_matmul: the activation x must be a floating-point tensor, "
                        f"got {x.dtype}; convert it with x.float() or x.bfloat16()")
    if x.dim() == 0:
        raise ValueError("quantized_matmul: x must have at least one dimension "
                         "([..., in_features]), got a 0-d tensor")
    _check_weight(x.shape[-1], w, scaler, zero_point, block_size)
    if quantize_activation and block_size != PER_CHANNEL:
        raise NotImplementedError(
            "quantized_matmul: quantize_activation=True works with per-channel weights only "
            f"(block_size=-1), as in PyTorch/XLA; got block_size={block_size}. Pass "
            "quantize_activation=False for blockwise weights.")


def _check_weight(in_features: int, w: torch.Tensor, scaler: torch.Tensor,
                  zero_point: torch.Tensor | None, block_size: int) -> None:
    _check_block_size(block_size)
    if w.dtype != torch.int8:
        raise TypeError(f"quantized_matmul: the weight w must be torch.int8, got {w.dtype}; "
                        "quantize it to int8 first (4-bit values go in an int8 tensor, "
                        "with int4_weight=True)")
    for name, t in (("scale", scaler), ("zero_point", zero_point)):
        if t is not None and not t.is_floating_point():
            raise TypeError(f"quantized_matmul: {name} must be a floating-point tensor, got "
                            f"{t.dtype}")
    if block_size == PER_CHANNEL:
        _check_per_channel(in_features, w, scaler, zero_point)
    else:
        _check_blockwise(in_features, block_size, w, scaler, zero_point)


def _check_block_size(block_size: int) -> None:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or (
            block_size != PER_CHANNEL and block_size <= 0):
        raise ValueError(f"quantized_matmul: block_size must be -1 (per-channel) or a "
                         f"positive block length, got {block_size!r}")


def _check_per_channel(in_features: int, w, scaler, zero_point) -> None:
    if w.dim() != 2:
        raise ValueError(
            f"quantized_matmul: per-channel quantization (block_size=-1) takes a 2-d weight "
            f"[out_features, in_features], got shape {tuple(w.shape)}; a 3-d weight is "
            "blockwise: pass its block_size")
    if w.shape[1] != in_features:
        raise ValueError(f"quantized_matmul: x has {in_features} features (its last "
                         f"dimension) but the weight of shape {tuple(w.shape)} "
                         f"[out_features, in_features] takes {w.shape[1]}")
    _check_scale_shape(scaler, zero_point, (w.shape[0],), "[out_features]")


def _check_blockwise(in_features: int, block_size: int, w, scaler, zero_point) -> None:
    if in_features % block_size:
        raise ValueError(f"quantized_matmul: x's {in_features} features (its last dimension) "
                         f"do not divide into blocks of {block_size}; pick a block_size that "
                         "divides in_features")
    expected = (in_features // block_size, block_size)
    if w.dim() != 3 or tuple(w.shape[:2]) != expected:
        raise ValueError(
            f"quantized_matmul: blockwise quantization (block_size={block_size}) takes a "
            f"weight [in_features / block_size, block_size, out_features] = "
            f"[{expected[0]}, {expected[1]}, out_features] for x's {in_features} features, "
            f"got shape {tuple(w.shape)}")
    _check_scale_shape(scaler, zero_point, (w.shape[0], w.shape[2]),
                       "[in_features / block_size, out_features]")


def _check_scale_shape(scaler, zero_point, shape: tuple, layout: str) -> None:
    for name, t in (("scale", scaler), ("zero_point", zero_point)):
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"quantized_matmul: {name} must have shape {layout} = "
                             f"{list(shape)} for this weight, got {tuple(t.shape)}")


def _options(block_size: int | None, int4_weight: bool | None,
             quantize_activation: bool | None) -> tuple[int, bool, bool]:
    """The schema's optional arguments, None read as their defaults (as PyTorch/XLA's)."""
    return (PER_CHANNEL if block_size is None else block_size, bool(int4_weight),
            bool(quantize_activation))


# --- the kernels -------------------------------------------------------------------------


@torch.library.impl(XLA_LIB, "quantized_matmul", "XLA")
def quantized_matmul_xla(x: torch.Tensor, w: torch.Tensor, scaler: torch.Tensor,
                         zero_point: torch.Tensor | None = None, block_size: int = -1,
                         int4_weight: bool = False,
                         quantize_activation: bool = False) -> torch.Tensor:
    """The op on XLA tensors: one node whose HLO has the mixed-dtype dot."""
    block_size, int4_weight, quantize_activation = _options(block_size, int4_weight,
                                                            quantize_activation)
    _check(x, w, scaler, zero_point, block_size, quantize_activation)
    return xb.call_jax(lowering.quantized_matmul, (x, w, scaler, zero_point, block_size,
                                                   int4_weight, quantize_activation))


@torch.library.impl(XLA_LIB, "quantized_matmul", "CompositeExplicitAutograd")
def quantized_matmul(x: torch.Tensor, w: torch.Tensor, scaler: torch.Tensor,
                     zero_point: torch.Tensor | None = None, block_size: int = -1,
                     int4_weight: bool = False,
                     quantize_activation: bool = False) -> torch.Tensor:
    """The op on any other tensor (CPU, meta): the reference the XLA kernel must match.

    The weight's values are used as they are: with int4_weight they must already lie in
    [-8, 7] (`XlaQuantizedLinear.load_quantized_weight` checks it)."""
    block_size, _, quantize_activation = _options(block_size, int4_weight,
                                                  quantize_activation)
    _check(x, w, scaler, zero_point, block_size, quantize_activation)
    out_dtype = torch.promote_types(x.dtype, scaler.dtype)
    x_scale = None
    if quantize_activation:
        x, x_scale = _quantize_rows(x)
    accumulate = torch.int32 if quantize_activation else x.dtype
    x_acc, w_acc = x.to(accumulate), w.to(accumulate)
    zp = None if zero_point is None else zero_point.to(out_dtype)
    if block_size == PER_CHANNEL:
        out = F.linear(x_acc, w_acc).to(out_dtype) * scaler.to(out_dtype)
        if zp is not None:
            out = out - x.to(out_dtype).sum(-1, keepdim=True) * zp
    else:
        blocks_x = x_acc.reshape(*x.shape[:-1], w.shape[0], block_size)  # [..., blocks, block]
        acc = torch.einsum("...sc,scn->...sn", blocks_x, w_acc).to(out_dtype)
        out = torch.einsum("...sn,sn->...n", acc, scaler.to(out_dtype))
        if zp is not None:
            out = out - blocks_x.to(out_dtype).sum(-1) @ zp
    return out if x_scale is None else out * x_scale.to(out_dtype)


def _quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`lowering.quantize_rows` in PyTorch: int8 rows and their scales (x's dtype)."""
    peak = x.abs().amax(-1, keepdim=True)
    scale = torch.where(peak > 0, peak, torch.ones_like(peak)) / 127
    return torch.clamp(torch.round(x / scale), -128, 127).to(torch.int8), scale


@torch.library.register_fake("xla::quantized_matmul")
def _quantized_matmul_fake(x, w, scaler, zero_point=None, block_size=-1, int4_weight=False,
                           quantize_activation=False) -> torch.Tensor:
    block_size, _, quantize_activation = _options(block_size, int4_weight,
                                                  quantize_activation)
    _check(x, w, scaler, zero_point, block_size, quantize_activation)
    out_features = w.shape[0] if block_size == PER_CHANNEL else w.shape[2]
    return x.new_empty((*x.shape[:-1], out_features),
                       dtype=torch.promote_types(x.dtype, scaler.dtype))


# --- autograd: the op is linear in x --------------------------------------------------------


def _dequantize_weight(w: torch.Tensor, scaler: torch.Tensor,
                       zero_point: torch.Tensor | None = None,
                       block_size: int = -1) -> torch.Tensor:
    """The floating-point weight [out_features, in_features] the op multiplies by:
    `w * scale - zero_point`, in the scale's dtype."""
    zp = torch.zeros_like(scaler) if zero_point is None else zero_point.to(scaler.dtype)
    if block_size == PER_CHANNEL:
        return w.to(scaler.dtype) * scaler[:, None] - zp[:, None]
    weight = w.to(scaler.dtype) * scaler[:, None, :] - zp[:, None, :]  # [blocks, block, out]
    return weight.reshape(-1, weight.shape[-1]).T


def _setup_context(ctx, inputs, output) -> None:
    x, w, scaler, zero_point, block_size, _, quantize_activation = inputs
    ctx.save_for_backward(w, scaler, zero_point)
    ctx.block_size, _, ctx.quantize_activation = _options(block_size, False,
                                                          quantize_activation)
    ctx.x_dtype = x.dtype


def _backward(ctx, grad: torch.Tensor) -> tuple:
    if any(ctx.needs_input_grad[2:4]):  # (as long as the arguments passed)
        raise NotImplementedError("quantized_matmul: no gradient for scale or zero_point "
                                  "(only for x); detach them, or train the float weight")
    if ctx.quantize_activation:
        raise NotImplementedError(
            "quantized_matmul: no gradient through quantize_activation=True (rounding x has "
            "no useful gradient); use quantize_activation=False when x needs a gradient")
    w, scaler, zero_point = ctx.saved_tensors
    weight = _dequantize_weight(w, scaler, zero_point, ctx.block_size)
    dtype = torch.promote_types(grad.dtype, weight.dtype)
    grad_x = (grad.to(dtype) @ weight.to(dtype)).to(ctx.x_dtype)
    return grad_x, None, None, None, None, None, None


torch.library.register_autograd("xla::quantized_matmul", _backward,
                                setup_context=_setup_context)


# --- the module --------------------------------------------------------------------------


class XlaQuantizedLinear(torch.nn.Module):
    """A bias-free linear layer with a quantized weight: `torch.ops.xla.quantized_matmul`.

    The buffers (`weight` int8, `weight_scaler`, `zero_point` unless `is_symmetric`) have
    the op's shapes for the chosen scheme; fill them with `load_quantized_weight` or from
    a state dict."""

    def __init__(self, input_dim: int, output_dim: int, is_symmetric: bool = False,
                 block_size: int = -1, int4_weight: bool = False,
                 quantize_activation: bool = False) -> None:
        super().__init__()
        _check_block_size(block_size)
        if block_size != PER_CHANNEL and input_dim % block_size:
            raise ValueError(f"XlaQuantizedLinear: input_dim {input_dim} does not divide into "
                             f"blocks of {block_size}; pick a block_size that divides it")
        if block_size != PER_CHANNEL and quantize_activation:
            raise NotImplementedError("XlaQuantizedLinear: quantize_activation=True works "
                                      "with per-channel weights only (block_size=-1)")
        self.input_dim, self.output_dim = input_dim, output_dim
        self.is_symmetric = is_symmetric
        self.block_size = block_size
        self.int4_weight = int4_weight
        self.quantize_activation = quantize_activation
        weight_shape, scale_shape = self._shapes()
        self.register_buffer("weight", torch.zeros(weight_shape, dtype=torch.int8))
        self.register_buffer("weight_scaler", torch.zeros(scale_shape))
        self.register_buffer("zero_point", None if is_symmetric else torch.zeros(scale_shape))

    def _shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        if self.block_size == PER_CHANNEL:
            return (self.output_dim, self.input_dim), (self.output_dim,)
        blocks = self.input_dim // self.block_size
        return (blocks, self.block_size, self.output_dim), (blocks, self.output_dim)

    def load_quantized_weight(self, weight: torch.Tensor, weight_scaler: torch.Tensor,
                              zero_point: torch.Tensor | None = None) -> None:
        """Take a quantized weight: per-channel `weight` [output_dim, input_dim] and
        `weight_scaler` [output_dim]; blockwise `weight` [input_dim / block_size,
        block_size, output_dim] and `weight_scaler` [input_dim / block_size, output_dim].
        `zero_point` (the scaler's shape) needs `is_symmetric=False`; without one the layer
        computes symmetrically."""
        if zero_point is not None and self.is_symmetric:
            raise ValueError("XlaQuantizedLinear: this layer is symmetric (is_symmetric=True) "
                             "and takes no zero_point; build it with is_symmetric=False")
        _check_weight(self.input_dim, weight, weight_scaler, zero_point, self.block_size)
        out_features = weight.shape[0] if self.block_size == PER_CHANNEL else weight.shape[2]
        if out_features != self.output_dim:
            raise ValueError(f"XlaQuantizedLinear: the weight of shape {tuple(weight.shape)} has "
                             f"{out_features} output features, the layer {self.output_dim}")
        if self.int4_weight:
            _check_int4_values(weight)
        self.weight, self.weight_scaler, self.zero_point = weight, weight_scaler, zero_point

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.xla.quantized_matmul(
            x, self.weight, self.weight_scaler, self.zero_point, block_size=self.block_size,
            int4_weight=self.int4_weight, quantize_activation=self.quantize_activation)


def _check_int4_values(weight: torch.Tensor) -> None:
    low, high = weight.min().item(), weight.max().item()
    if low < INT4_RANGE[0] or high > INT4_RANGE[1]:
        raise ValueError(f"XlaQuantizedLinear: int4_weight=True needs weight values in "
                         f"[-8, 7], got values in [{low}, {high}]; quantize with n_bits=4")


# --- 4-bit packing -----------------------------------------------------------------------


def pack_4bit(x: torch.Tensor, dtype: torch.dtype = torch.int8) -> torch.Tensor:
    """Two 4-bit values (int8 tensor, values in [-8, 7]) per byte, along the last dimension:
    element 2i in the low half of byte i, element 2i+1 in the high half. Returns int8 with
    half as many elements in the last dimension."""
    _check_container(dtype, "pack_4bit")
    if x.dtype != torch.int8:
        raise TypeError(f"pack_4bit: x must be torch.int8 holding values in [-8, 7], got "
                        f"{x.dtype}")
    if x.dim() == 0 or x.shape[-1] % 2:
        raise ValueError(f"pack_4bit: the last dimension must have an even length (two "
                         f"values per byte), got shape {tuple(x.shape)}")
    nibbles = x.to(torch.int16) & 0xF  # two's complement 4-bit codes
    packed = nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)
    return packed.to(torch.uint8).view(torch.int8)


def unpack_4bit(x: torch.Tensor, dtype: torch.dtype = torch.int8) -> torch.Tensor:
    """The inverse of `pack_4bit`: each int8 byte to its two signed 4-bit values, low half
    first; the last dimension doubles."""
    _check_container(dtype, "unpack_4bit")
    if x.dtype != torch.int8:
        raise TypeError(f"unpack_4bit: x must be a packed torch.int8 tensor, got {x.dtype}")
    if x.dim() == 0:
        raise ValueError("unpack_4bit: x must have at least one dimension")
    wide = x.to(torch.int16)
    low = ((wide & 0xF) ^ 8) - 8  # sign-extend the low half
    high = wide >> 4  # the arithmetic shift sign-extends the high half
    return torch.stack((low, high), dim=-1).flatten(-2).to(torch.int8)


def _check_container(dtype: torch.dtype, what: str) -> None:
    if dtype != torch.int8:
        raise TypeError(f"{what}: only torch.int8 containers are supported (as in "
                        f"PyTorch/XLA), got dtype={dtype}")
