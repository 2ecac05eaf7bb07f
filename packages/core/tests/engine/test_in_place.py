"""Pointwise in-place ops on one tensor (`backend/in_place.py`, `checked_kernel`): the
same values, views, dtypes, autograd and errors as the same op on the CPU."""

from __future__ import annotations

import pytest
import torch

from torch_xla.backend import in_place

from .helpers import assert_close

OPS = {
    "add_.Tensor": lambda x, a, b: x.add_(a, alpha=0.5),
    "add_.Scalar": lambda x, a, b: x.add_(2.5),
    "sub_.Tensor": lambda x, a, b: x.sub_(a),
    "sub_.Scalar": lambda x, a, b: x.sub_(1.5),
    "mul_.Tensor": lambda x, a, b: x.mul_(a),
    "mul_.Scalar": lambda x, a, b: x.mul_(3.0),
    "div_.Tensor": lambda x, a, b: x.div_(b),
    "div_.Scalar": lambda x, a, b: x.div_(4.0),
    "div_.Tensor_mode": lambda x, a, b: x.div_(b, rounding_mode="floor"),
    "div_.Scalar_mode": lambda x, a, b: x.div_(0.7, rounding_mode="trunc"),
    "addcdiv_": lambda x, a, b: x.addcdiv_(a, b, value=0.3),
    "addcmul_": lambda x, a, b: x.addcmul_(a, b, value=-0.2),
    "lerp_.Scalar": lambda x, a, b: x.lerp_(a, 0.25),
    "lerp_.Tensor": lambda x, a, b: x.lerp_(a, b / 4),
    "clamp_": lambda x, a, b: x.clamp_(-0.5, 0.5),
    "clamp_.Tensor": lambda x, a, b: x.clamp_(a - 1, a + 1),
    "clamp_min_": lambda x, a, b: x.clamp_min_(0.1),
    "clamp_min_.Tensor": lambda x, a, b: x.clamp_min_(a),
    "clamp_max_": lambda x, a, b: x.clamp_max_(0.1),
    "clamp_max_.Tensor": lambda x, a, b: x.clamp_max_(a),
    "pow_.Scalar": lambda x, a, b: x.abs_().pow_(1.5),
    "pow_.Tensor": lambda x, a, b: x.abs_().pow_(b),
    "masked_fill_.Scalar": lambda x, a, b: x.masked_fill_(a > 0, 7.0),
    "masked_fill_.Tensor": lambda x, a, b: x.masked_fill_(a > 0, b[0, 0]),
    "sqrt_": lambda x, a, b: x.abs_().sqrt_(),
    "rsqrt_": lambda x, a, b: x.abs_().add_(0.1).rsqrt_(),
    "exp_": lambda x, a, b: x.exp_(),
    "log_": lambda x, a, b: x.abs_().add_(0.1).log_(),
    "neg_": lambda x, a, b: x.neg_(),
    "abs_": lambda x, a, b: x.abs_(),
    "reciprocal_": lambda x, a, b: x.add_(3).reciprocal_(),
    "sigmoid_": lambda x, a, b: x.sigmoid_(),
    "tanh_": lambda x, a, b: x.tanh_(),
}


def test_every_registered_op_is_tested():
    assert {inplace for inplace, _ in in_place.POINTWISE_OPS} == set(OPS)


def operands(device):
    g = torch.Generator().manual_seed(0)
    x, a = torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)
    b = torch.rand(3, 4, generator=g) + 0.5
    return x.to(device), a.to(device), b.to(device)


@pytest.mark.parametrize("name", list(OPS))
def test_values_and_views_match_cpu(device, name):
    def run(d):
        x, a, b = operands(d)
        row, column = x[1], x[:, 2]  # views made before the op see its result
        with torch.no_grad():
            out = OPS[name](x, a, b)
        return out is x, x, row, column

    (same, *got), (cpu_same, *want) = run(device), run("cpu")
    assert same and cpu_same
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["mul_.Tensor", "addcdiv_", "lerp_.Scalar", "clamp_", "exp_"])
def test_into_a_view_reaches_the_base(device, name):
    def run(d):
        base, a, b = operands(d)
        with torch.no_grad():
            OPS[name](base[:, 1:3], a[:, 1:3], b[:, 1:3])
        return base

    assert_close(run(device), run("cpu"), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["mul_.Tensor", "addcmul_", "lerp_.Tensor", "clamp_", "tanh_"])
def test_autograd_through_the_op(device, name):
    def grads(d):
        x0, a0, b0 = operands(d)
        x, a = x0.clone().requires_grad_(), a0.clone().requires_grad_()
        y = x * 1.5
        version = y._version
        OPS[name](y, a, b0)
        assert y._version > version
        (y * torch.arange(12.0).reshape(3, 4).to(d)).sum().backward()
        return x.grad, a.grad

    for got, want in zip(grads(device), grads("cpu"), strict=True):
        if want is None:
            assert got is None
        else:
            assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_lower_precision_self_keeps_its_dtype(device):
    """The result is computed in the promoted type and cast to `self`'s, as on the CPU."""
    def run(d):
        x, a, b = operands(d)
        half = x.to(torch.bfloat16)
        half.addcdiv_(a, b, value=0.5)
        half.mul_(a)
        return half

    got, want = run(device), run("cpu")
    assert got.dtype == torch.bfloat16
    assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("case", ["broadcast self", "int from float"])
def test_errors_are_torchs(device, case):
    def attempt(d):
        x, a, b = operands(d)
        if case == "broadcast self":
            x[0].addcmul_(a, b)
        else:
            torch.ones(3, 4, dtype=torch.int64, device=d).div_(b)

    with pytest.raises(RuntimeError) as cpu_error:
        attempt("cpu")
    with pytest.raises(RuntimeError) as error:
        attempt(device)
    assert str(error.value) == str(cpu_error.value)


def test_polygamma_in_place_matches_cpu(device):
    """`polygamma_` has no functionalization kernel of PyTorch's; its fallback refused the
    op on the device ("Found a custom (non-ATen) operator ...")."""
    base = torch.rand(4, 3) + 0.5
    for n in (0, 1, 3):
        x, cpu = base.to(device), base.clone()
        assert x.polygamma_(n) is x
        assert_close(x.cpu(), cpu.polygamma_(n))
    x, cpu = base.to(device), base.clone()
    x[1].polygamma_(2)  # into a view: the base sees it
    cpu[1].polygamma_(2)
    assert_close(x.cpu(), cpu)


def test_every_in_place_op_without_a_functionalization_kernel_gets_ours():
    """PyTorch's functionalization fallback refuses an in-place op it has no kernel for
    (unless the op decomposes first): once the backend is registered (ours for those in
    `UNKERNELED`), no such ATen op is left."""
    lacking = set()
    for full in torch._C._dispatch_get_all_op_names():
        name = full.removeprefix("aten::")
        packet = name.partition(".")[0]
        if (name == full or not packet.endswith("_") or packet.startswith("_")
                or packet.endswith("__")):
            continue
        if not any(torch._C._dispatch_has_kernel_for_dispatch_key(full, key) for key in
                   ("Functionalize", "CompositeImplicitAutograd")):
            lacking.add(name)
    assert not lacking, (f"in-place ops with no functionalization kernel: {sorted(lacking)}; "
                         "give each its functional form in in_place.UNKERNELED")
