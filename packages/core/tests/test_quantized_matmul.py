"""`torch_xla.experimental.xla_quantized_matmul`: `torch.ops.xla.quantized_matmul`,
`XlaQuantizedLinear`, `pack_4bit`/`unpack_4bit`.

The oracle is the op's eager CPU kernel; that kernel is itself checked against the
dequantized weight `w * scale - zero_point` in float64. The CPU plugin's XLA cannot run
a dot on 4-bit integers, so int4 programs are checked by their HLO only.
"""

from __future__ import annotations

import re

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import torch_xla
import torch_xla.debug.metrics as met
from torch_xla import _XLAC
from torch_xla.experimental.eager import eager_mode_context
from torch_xla.experimental.xla_quantized_matmul import (
    XlaQuantizedLinear,
    pack_4bit,
    unpack_4bit,
)
from torch_xla.lowering import quantized_matmul as lowering

IN, OUT, BLOCK = 8, 6, 2


def _weights(block_size: int, zero_point: bool, int4: bool = False, scale_dtype=torch.float32):
    """(w, scale, zero_point) of the op's shapes for the scheme, from a fixed seed."""
    g = torch.Generator().manual_seed(1)
    low, high = (-8, 8) if int4 else (-128, 128)
    w_shape = (OUT, IN) if block_size == -1 else (IN // block_size, block_size, OUT)
    s_shape = (OUT,) if block_size == -1 else (IN // block_size, OUT)
    w = torch.randint(low, high, w_shape, dtype=torch.int8, generator=g)
    scale = (torch.rand(s_shape, generator=g) / 50 + 1e-3).to(scale_dtype)
    zp = (torch.randn(s_shape, generator=g) / 10).to(scale_dtype) if zero_point else None
    return w, scale, zp


def _x(shape=(2, 3, IN), dtype=torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(2)).to(dtype)


def _dequantized(w, scale, zp, block_size) -> torch.Tensor:
    """The float64 weight [IN, OUT] the op multiplies by."""
    w, scale = w.double(), scale.double()
    zp = torch.zeros_like(scale) if zp is None else zp.double()
    if block_size == -1:
        return (w * scale[:, None] - zp[:, None]).T
    return (w * scale[:, None, :] - zp[:, None, :]).reshape(-1, w.shape[-1])


def _on(device, *tensors):
    return [None if t is None else t.to(device) for t in tensors]


# --- the CPU reference -------------------------------------------------------------------

@pytest.mark.parametrize("block_size", [-1, BLOCK, IN])
@pytest.mark.parametrize("zero_point", [False, True])
def test_reference_multiplies_by_the_dequantized_weight(block_size, zero_point):
    x = _x()
    w, scale, zp = _weights(block_size, zero_point)
    out = torch.ops.xla.quantized_matmul(x, w, scale, zp, block_size)
    expected = x.double() @ _dequantized(w, scale, zp, block_size)
    assert out.shape == (2, 3, OUT) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("zero_point", [False, True])
def test_reference_with_quantized_activation_is_close_to_the_float_activation(zero_point):
    x = _x()
    w, scale, zp = _weights(-1, zero_point)
    out = torch.ops.xla.quantized_matmul(x, w, scale, zp, quantize_activation=True)
    exact = x.double() @ _dequantized(w, scale, zp, -1)
    # int8 rows: each element off by up to half a step (max|row| / 127)
    step = x.abs().amax(-1, keepdim=True).double() / 127
    bound = step / 2 * _dequantized(w, scale, zp, -1).abs().sum(0)
    assert ((out.double() - exact).abs() <= bound * 1.01 + 1e-6).all()
    assert not torch.equal(out, torch.ops.xla.quantized_matmul(x, w, scale, zp))


@pytest.mark.parametrize("x_dtype,scale_dtype,expected", [
    (torch.float32, torch.float32, torch.float32),
    (torch.bfloat16, torch.bfloat16, torch.bfloat16),
    (torch.bfloat16, torch.float32, torch.float32),
    (torch.float16, torch.bfloat16, torch.float32),
])
def test_result_dtype_promotes_the_activation_and_the_scale(x_dtype, scale_dtype, expected):
    w, scale, _ = _weights(-1, False, scale_dtype=scale_dtype)
    assert torch.ops.xla.quantized_matmul(_x(dtype=x_dtype), w, scale).dtype == expected
    meta = torch.ops.xla.quantized_matmul(*_on("meta", _x(dtype=x_dtype), w, scale))
    assert meta.dtype == expected and meta.shape == (2, 3, OUT)


# --- on the device, against the reference ------------------------------------------------

# (id, x shape, x dtype, scale dtype, zero point, block size, quantize_activation, tolerance)
# Tolerances: float32 rounding differs in the dot's summation order only; bfloat16
# results may differ by one bfloat16 step (2**-8 relative) where the two round apart.
F32, BF16 = dict(rtol=1e-5, atol=1e-5), dict(rtol=1e-2, atol=1e-2)
CASES = [
    ("per-channel", (2, 3, IN), torch.float32, torch.float32, False, -1, False, F32),
    ("per-channel 1-d x", (IN,), torch.float32, torch.float32, False, -1, False, F32),
    ("per-channel bf16", (3, IN), torch.bfloat16, torch.bfloat16, False, -1, False, BF16),
    ("bf16 x, f32 scale", (3, IN), torch.bfloat16, torch.float32, False, -1, False, BF16),
    ("per-channel zero point", (2, 3, IN), torch.float32, torch.float32, True, -1, False, F32),
    ("quantized activation", (2, 3, IN), torch.float32, torch.float32, False, -1, True, F32),
    ("quantized activation, zero point", (4, IN), torch.float32, torch.float32, True, -1, True,
     F32),
    ("blockwise", (2, 3, IN), torch.float32, torch.float32, False, BLOCK, False, F32),
    ("blockwise one block", (3, IN), torch.float32, torch.float32, False, IN, False, F32),
    ("blockwise bf16", (3, IN), torch.bfloat16, torch.bfloat16, False, BLOCK, False, BF16),
    ("blockwise zero point", (2, 3, IN), torch.float32, torch.float32, True, BLOCK, False, F32),
]


@pytest.mark.parametrize("shape,x_dtype,scale_dtype,zero_point,block_size,quantize,tol",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_device_matches_the_reference(shape, x_dtype, scale_dtype, zero_point, block_size,
                                      quantize, tol):
    device = torch_xla.device()
    x = _x(shape, x_dtype)
    w, scale, zp = _weights(block_size, zero_point, scale_dtype=scale_dtype)
    expected = torch.ops.xla.quantized_matmul(x, w, scale, zp, block_size, False, quantize)
    met.clear_all()
    out = torch.ops.xla.quantized_matmul(*_on(device, x, w, scale, zp), block_size, False,
                                         quantize)
    assert "xla::call_jax" in _XLAC._get_xla_tensors_text([out])  # one node, no fallback
    torch_xla.sync()
    assert met.executed_fallback_ops() == []
    assert out.dtype == expected.dtype and out.shape == expected.shape
    torch.testing.assert_close(out.cpu(), expected, **tol)


def test_a_row_of_zeros_quantizes_without_dividing_by_zero():
    x = _x((3, IN))
    x[1] = 0
    w, scale, _ = _weights(-1, False)
    expected = torch.ops.xla.quantized_matmul(x, w, scale, quantize_activation=True)
    assert torch.isfinite(expected).all() and (expected[1] == 0).all()
    out = torch.ops.xla.quantized_matmul(*_on(torch_xla.device(), x, w, scale),
                                         quantize_activation=True)
    torch.testing.assert_close(out.cpu(), expected)
    values, scales = lowering.quantize_rows(jnp.asarray(x.numpy()))
    assert (np.asarray(values)[1] == 0).all() and np.asarray(scales)[1, 0] == np.float32(1 / 127)


# --- the HLO: one dot on the integer weight ----------------------------------------------

def _dot_lines(out: torch.Tensor) -> list[str]:
    return [line for line in _XLAC._get_xla_tensors_hlo([out]).splitlines() if " dot(" in line]


@pytest.mark.parametrize("x_dtype,int4,pattern", [
    (torch.bfloat16, False, r"= bf16\[3,6\]\S* dot\(bf16\[3,8\]\S* %\S+, s8\[6,8\]"),
    (torch.float32, False, r"= f32\[3,6\]\S* dot\(f32\[3,8\]\S* %\S+, s8\[6,8\]"),
    (torch.bfloat16, True, r"= bf16\[3,6\]\S* dot\(bf16\[3,8\]\S* %\S+, s4\[6,8\]"),
])
def test_the_activation_meets_the_integer_weight_in_one_dot(x_dtype, int4, pattern):
    w, scale, _ = _weights(-1, False, int4=int4, scale_dtype=x_dtype)
    out = torch.ops.xla.quantized_matmul(*_on(torch_xla.device(), _x((3, IN), x_dtype), w,
                                              scale), int4_weight=int4)
    dots = _dot_lines(out)
    assert len(dots) == 1 and re.search(pattern, dots[0]), dots


def test_quantized_activation_makes_an_integer_dot():
    w, scale, _ = _weights(-1, False)
    out = torch.ops.xla.quantized_matmul(*_on(torch_xla.device(), _x((3, IN)), w, scale),
                                         quantize_activation=True)
    dots = _dot_lines(out)
    assert len(dots) == 1 and re.search(r"= s32\[3,6\]\S* dot\(s8\[3,8\]\S* %\S+, s8\[6,8\]",
                                        dots[0]), dots


def test_blockwise_dot_is_batched_over_the_blocks_on_the_integer_weight():
    w, scale, _ = _weights(BLOCK, False)
    out = torch.ops.xla.quantized_matmul(*_on(torch_xla.device(), _x((3, IN)), w, scale),
                                         block_size=BLOCK)
    assert any(re.search(r"dot\(f32\[3,4,2\]\S* %\S+, s8\[4,2,6\]", d) and "lhs_batch_dims={1}"
               in d for d in _dot_lines(out)), _dot_lines(out)


# --- lazy, eager and compiled --------------------------------------------------------------

def test_lazy_mode_records_and_compiles_once_per_shape():
    device = torch_xla.device()
    w, scale, _ = _weights(-1, False)
    w, scale = _on(device, w, scale)
    torch_xla.sync()
    met.clear_all()
    results = []
    for seed in range(3):
        x = torch.randn(3, IN, generator=torch.Generator().manual_seed(seed))
        out = torch.ops.xla.quantized_matmul(x.to(device), w, scale)
        assert met.metric_data("CompileTime") is None or seed > 0  # nothing ran yet
        torch_xla.sync()
        results.append((out.cpu(), torch.ops.xla.quantized_matmul(x, w.cpu(), scale.cpu())))
    assert met.metric_data("CompileTime")[0] == 1
    for got, expected in results:
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_eager_mode_computes_at_once():
    w, scale, zp = _weights(BLOCK, True)
    x = _x((3, IN))
    expected = torch.ops.xla.quantized_matmul(x, w, scale, zp, BLOCK)
    with eager_mode_context(True):
        out = torch.ops.xla.quantized_matmul(*_on(torch_xla.device(), x, w, scale, zp), BLOCK)
        assert "xla::call_jax" not in _XLAC._get_xla_tensors_text([out])  # already data
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block_size", [-1, BLOCK])
def test_torch_compile_openxla_matches_the_reference(block_size):
    layer = _loaded_layer(block_size, zero_point=True)
    x = _x((3, IN))
    expected = layer(x)
    compiled = torch.compile(layer.to(torch_xla.device()), backend="openxla")
    torch.testing.assert_close(compiled(x.to(torch_xla.device())).cpu(), expected,
                               rtol=1e-5, atol=1e-5)


# --- autograd ------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["cpu", "xla"])
@pytest.mark.parametrize("block_size,zero_point", [(-1, False), (-1, True), (BLOCK, True)])
def test_gradient_of_x_is_through_the_dequantized_weight(where, block_size, zero_point):
    device = torch_xla.device() if where == "xla" else where
    w, scale, zp = _weights(block_size, zero_point)
    x = _x((3, IN))
    grad = torch.randn(3, OUT, generator=torch.Generator().manual_seed(3))
    x_dev = x.to(device).requires_grad_()
    torch.ops.xla.quantized_matmul(x_dev, *_on(device, w, scale, zp), block_size).backward(
        grad.to(device))
    expected = grad.double() @ _dequantized(w, scale, zp, block_size).T
    assert x_dev.grad.dtype == torch.float32
    torch.testing.assert_close(x_dev.grad.cpu().double(), expected, rtol=1e-5, atol=1e-5)


def test_gradients_it_cannot_give_are_refused():
    w, scale, _ = _weights(-1, False)
    x = _x((3, IN)).requires_grad_()
    out = torch.ops.xla.quantized_matmul(x, w, scale.clone().requires_grad_())
    with pytest.raises(NotImplementedError, match="no gradient for scale or zero_point"):
        out.sum().backward()
    out = torch.ops.xla.quantized_matmul(x, w, scale, quantize_activation=True)
    with pytest.raises(NotImplementedError, match="no gradient through quantize_activation"):
        out.sum().backward()


# --- XlaQuantizedLinear ------------------------------------------------------------------

def _loaded_layer(block_size: int, zero_point: bool) -> XlaQuantizedLinear:
    layer = XlaQuantizedLinear(IN, OUT, block_size=block_size)
    layer.load_quantized_weight(*_weights(block_size, zero_point))
    return layer


@pytest.mark.parametrize("block_size", [-1, BLOCK])
def test_layer_computes_the_op_on_cpu_and_device(block_size):
    layer = _loaded_layer(block_size, zero_point=True)
    w, scale, zp = _weights(block_size, True)
    x = _x()
    expected = torch.ops.xla.quantized_matmul(x, w, scale, zp, block_size)
    torch.testing.assert_close(layer(x), expected)
    device = torch_xla.device()
    torch.testing.assert_close(layer.to(device)(x.to(device)).cpu(), expected,
                               rtol=1e-5, atol=1e-5)


def test_layer_buffers_have_the_schemes_shapes():
    per_channel = XlaQuantizedLinear(IN, OUT).state_dict()
    assert {k: tuple(v.shape) for k, v in per_channel.items()} == {
        "weight": (OUT, IN), "weight_scaler": (OUT,), "zero_point": (OUT,)}
    assert per_channel["weight"].dtype == torch.int8
    blockwise = XlaQuantizedLinear(IN, OUT, is_symmetric=True, block_size=BLOCK).state_dict()
    assert {k: tuple(v.shape) for k, v in blockwise.items()} == {
        "weight": (IN // BLOCK, BLOCK, OUT), "weight_scaler": (IN // BLOCK, OUT)}


def test_layer_quantized_from_a_float_linear_is_close_to_it():
    linear = torch.nn.Linear(IN, OUT, bias=False)
    w = linear.weight.detach()
    scale = w.abs().amax(1) / 127
    layer = XlaQuantizedLinear(IN, OUT, is_symmetric=True)
    layer.load_quantized_weight(torch.round(w / scale[:, None]).to(torch.int8), scale)
    x = _x()
    torch.testing.assert_close(layer(x), linear(x).detach(), rtol=0.05, atol=0.02)


@pytest.mark.parametrize("make,args,error,match", [
    (dict(), (torch.zeros(OUT, IN + 1, dtype=torch.int8), torch.ones(OUT)), ValueError,
     "x has 8 features"),
    (dict(), (torch.zeros(OUT + 1, IN, dtype=torch.int8), torch.ones(OUT + 1)), ValueError,
     "has 7 output features, the layer 6"),
    (dict(), (torch.zeros(OUT, IN), torch.ones(OUT)), TypeError, "must be torch.int8"),
    (dict(is_symmetric=True), (torch.zeros(OUT, IN, dtype=torch.int8), torch.ones(OUT),
                               torch.zeros(OUT)), ValueError, "takes no zero_point"),
    (dict(int4_weight=True), (torch.full((OUT, IN), 8, dtype=torch.int8), torch.ones(OUT)),
     ValueError, r"values in \[-8, 7\], got values in \[8, 8\]"),
    (dict(block_size=BLOCK), (torch.zeros(OUT, IN, dtype=torch.int8), torch.ones(OUT)),
     ValueError, r"\[in_features / block_size, block_size, out_features\]"),
])
def test_layer_refuses_a_weight_that_does_not_fit(make, args, error, match):
    layer = XlaQuantizedLinear(IN, OUT, **make)
    with pytest.raises(error, match=match):
        layer.load_quantized_weight(*args)


def test_layer_refuses_a_block_size_that_does_not_divide_the_input():
    with pytest.raises(ValueError, match="does not divide into blocks of 3"):
        XlaQuantizedLinear(IN, OUT, block_size=3)
    with pytest.raises(NotImplementedError, match="per-channel weights only"):
        XlaQuantizedLinear(IN, OUT, block_size=BLOCK, quantize_activation=True)


# --- the op's errors, alike on every kernel ------------------------------------------------

def _bad(**changes):
    w, scale, _ = _weights(-1, False)
    args = dict(x=_x((3, IN)), w=w, scale=scale, zero_point=None, block_size=-1,
                quantize_activation=False)
    args.update(changes)
    return args


BAD = [
    ("int x", _bad(x=torch.ones(3, IN, dtype=torch.int32)), TypeError, "floating-point"),
    ("float w", _bad(w=torch.ones(OUT, IN)), TypeError, "must be torch.int8"),
    ("int scale", _bad(scale=torch.ones(OUT, dtype=torch.int32)), TypeError,
     "scale must be a floating-point"),
    ("0-d x", _bad(x=torch.tensor(1.0)), ValueError, "at least one dimension"),
    ("in features", _bad(x=_x((3, IN + 1))), ValueError, "x has 9 features"),
    ("3-d w per-channel", _bad(w=torch.zeros(4, 2, OUT, dtype=torch.int8)), ValueError,
     "takes a 2-d weight"),
    ("scale shape", _bad(scale=torch.ones(OUT + 1)), ValueError,
     r"scale must have shape \[out_features\] = \[6\]"),
    ("zero point shape", _bad(zero_point=torch.ones(2, OUT)), ValueError,
     "zero_point must have shape"),
    ("block size 0", _bad(block_size=0), ValueError, "-1 .per-channel. or a positive"),
    ("block size -2", _bad(block_size=-2), ValueError, "-1 .per-channel. or a positive"),
    ("block not dividing", _bad(w=torch.zeros(2, 3, OUT, dtype=torch.int8), block_size=3),
     ValueError, "do not divide into blocks of 3"),
    ("2-d w blockwise", _bad(block_size=BLOCK), ValueError, r"= \[4, 2, out_features\]"),
    ("blockwise scale", _bad(w=torch.zeros(4, 2, OUT, dtype=torch.int8), block_size=BLOCK),
     ValueError, r"\[in_features / block_size, out_features\] = \[4, 6\]"),
    ("blockwise quantized activation", _bad(w=torch.zeros(4, 2, OUT, dtype=torch.int8),
                                            scale=torch.ones(4, OUT), block_size=BLOCK,
                                            quantize_activation=True),
     NotImplementedError, "per-channel weights only"),
]


@pytest.mark.parametrize("where", ["cpu", "meta", "xla"])
@pytest.mark.parametrize("args,error,match", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_arguments_say_what_is_wrong(where, args, error, match):
    device = torch_xla.device() if where == "xla" else where
    tensors = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    with pytest.raises(error, match=match):
        torch.ops.xla.quantized_matmul(
            tensors["x"], tensors["w"], tensors["scale"], tensors["zero_point"],
            tensors["block_size"], False, tensors["quantize_activation"])


# --- 4-bit packing -----------------------------------------------------------------------

def test_pack_unpack_round_trips_every_pair_of_4bit_values():
    values = torch.arange(-8, 8, dtype=torch.int8)
    pairs = torch.cartesian_prod(values, values).reshape(16, 32)
    packed = pack_4bit(pairs)
    assert packed.dtype == torch.int8 and packed.shape == (16, 16)
    assert torch.equal(unpack_4bit(packed), pairs)


def test_pack_puts_the_first_value_in_the_low_half():
    packed = pack_4bit(torch.tensor([1, -2, -8, 7], dtype=torch.int8))
    assert packed.view(torch.uint8).tolist() == [0xE1, 0x78]


@pytest.mark.parametrize("call,error,match", [
    (lambda: pack_4bit(torch.zeros(3, dtype=torch.int8)), ValueError, "even length"),
    (lambda: pack_4bit(torch.zeros(2, dtype=torch.int32)), TypeError, "must be torch.int8"),
    (lambda: pack_4bit(torch.zeros(2, dtype=torch.int8), dtype=torch.int32), TypeError,
     "only torch.int8 containers"),
    (lambda: unpack_4bit(torch.zeros(2, dtype=torch.uint8)), TypeError, "packed torch.int8"),
])
def test_packing_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
