"""`torch_xla.amp.autocast` and the `torch.autocast('xla')` kernels under it
(`torch_xla.backend.autocast`): eager CPU autocast in bfloat16 is the oracle for every
op's output dtype and values."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F
from conftest import run_python

import torch_xla
import torch_xla.amp
from torch_xla.backend import autocast as kernels
from torch_xla.plugins import registry

DTYPE = torch.bfloat16


@pytest.fixture(scope="module")
def device() -> torch.device:
    return torch_xla.device()


def _schema_names(dispatch_key: str) -> set[str]:
    names = set()
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::"):
            continue
        name = schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
        try:
            if torch._C._dispatch_has_kernel_for_dispatch_key(name, dispatch_key):
                names.add(name[len("aten::"):])
        except RuntimeError:  # schemas of TorchScript builtins that are not dispatcher ops
            pass
    return names


def _listed() -> set[str]:
    return {*kernels.LOWER_PRECISION, *kernels.FLOAT32, *kernels.PROMOTE}


def test_the_lists_are_torchs_cpu_autocast_lists():
    cpu = _schema_names("AutocastCPU")
    assert _listed() - cpu == set(), "listed ops that torch's CPU autocast does not cast"
    assert cpu - _listed() == set(kernels.LEFT_OUT), "CPU autocast ops missing from the lists"


def test_every_listed_op_has_an_xla_autocast_kernel():
    assert _schema_names("AutocastPrivateUse1") >= _listed()


def _f(*shape):
    return torch.randn(*shape)


def _b(*shape):
    return torch.randn(*shape).to(DTYPE)


def _prob(*shape):
    return torch.rand(*shape).to(DTYPE)


def _long(high, *shape):
    return torch.randint(0, high, shape)


# (id, op, input factory). Inputs mix float32 and bfloat16 as autocast programs do.
CASES = [
    # run in the autocast dtype
    ("mm", torch.mm, lambda: (_f(8, 8), _f(8, 8))),
    ("matmul_mixed", torch.matmul, lambda: (_b(8, 8), _f(8, 8))),
    ("__matmul__", lambda a, b: a @ b, lambda: (_b(8, 8), _f(8, 8))),
    ("bmm", torch.bmm, lambda: (_f(2, 4, 4), _f(2, 4, 4))),
    ("baddbmm", torch.baddbmm, lambda: (_f(2, 4, 4), _f(2, 4, 4), _f(2, 4, 4))),
    ("addmm", torch.addmm, lambda: (_f(8), _f(8, 8), _f(8, 8))),
    ("addbmm", torch.addbmm, lambda: (_f(4, 4), _f(2, 4, 4), _f(2, 4, 4))),
    ("linear", F.linear, lambda: (_f(4, 8), _f(3, 8), _f(3))),
    ("conv1d", F.conv1d, lambda: (_f(2, 3, 8), _f(4, 3, 3))),
    ("conv2d", F.conv2d, lambda: (_f(2, 3, 6, 6), _f(4, 3, 3, 3), _f(4))),
    ("conv3d", F.conv3d, lambda: (_f(1, 2, 4, 4, 4), _f(3, 2, 2, 2, 2))),
    ("conv_transpose1d", F.conv_transpose1d, lambda: (_f(2, 3, 8), _f(3, 4, 3))),
    ("conv_transpose2d", F.conv_transpose2d, lambda: (_f(2, 3, 5, 5), _f(3, 4, 3, 3))),
    ("conv_tbc", lambda x, w, b: torch.conv_tbc(x, w, b, 0),
     lambda: (_f(10, 7, 3), _f(5, 3, 5), _f(5))),
    ("prelu", F.prelu, lambda: (_f(2, 3, 4), _f(3))),
    ("sdpa", F.scaled_dot_product_attention,
     lambda: (_f(2, 3, 4, 8), _f(2, 3, 4, 8), _f(2, 3, 4, 8))),
    # run in float32
    ("mse_loss", F.mse_loss, lambda: (_b(8, 8), _b(8, 8))),
    ("l1_loss", F.l1_loss, lambda: (_b(8, 8), _b(8, 8))),
    ("smooth_l1_loss", F.smooth_l1_loss, lambda: (_b(8, 8), _b(8, 8))),
    ("huber_loss", F.huber_loss, lambda: (_b(8, 8), _b(8, 8))),
    ("nll_loss", F.nll_loss, lambda: (_b(8, 5), _long(5, 8))),
    ("nll_loss2d", F.nll_loss, lambda: (_b(2, 5, 3, 3), _long(5, 2, 3, 3))),
    ("cross_entropy", F.cross_entropy, lambda: (_b(8, 5), _long(5, 8))),
    ("binary_cross_entropy", F.binary_cross_entropy, lambda: (_prob(8), _prob(8))),
    ("bce_with_logits", F.binary_cross_entropy_with_logits, lambda: (_b(8, 8), _prob(8, 8))),
    ("kl_div", lambda a, b: F.kl_div(a, b, reduction="batchmean"),
     lambda: (_b(4, 5), _prob(4, 5))),
    ("poisson_nll_loss", F.poisson_nll_loss, lambda: (_b(8), _prob(8))),
    ("cosine_embedding_loss", F.cosine_embedding_loss,
     lambda: (_b(4, 3), _b(4, 3), _long(2, 4) * 2 - 1)),
    ("hinge_embedding_loss", F.hinge_embedding_loss, lambda: (_b(8, 8), _long(2, 8) * 2 - 1)),
    ("margin_ranking_loss", F.margin_ranking_loss, lambda: (_b(8), _b(8), _long(2, 8) * 2 - 1)),
    ("soft_margin_loss", F.soft_margin_loss, lambda: (_b(8, 8), _long(2, 8, 8) * 2 - 1)),
    ("triplet_margin_loss", F.triplet_margin_loss, lambda: (_b(8, 8), _b(8, 8), _b(8, 8))),
    ("multilabel_margin_loss", F.multilabel_margin_loss, lambda: (_b(4, 5), _long(5, 4, 5))),
    ("multi_margin_loss", F.multi_margin_loss, lambda: (_b(8, 5), _long(5, 8))),
    ("prod", torch.prod, lambda: (_prob(6) + 0.5,)),
    ("prod_dim", lambda x: torch.prod(x, 1), lambda: (_prob(3, 4) + 0.5,)),
    ("cdist", torch.cdist, lambda: (_b(5, 3), _b(4, 3))),
    ("trace", torch.trace, lambda: (_b(5, 5),)),
    ("avg_pool3d", lambda x: F.avg_pool3d(x, 2), lambda: (_b(1, 2, 4, 4, 4),)),
    ("max_pool3d", lambda x: F.max_pool3d(x, 2), lambda: (_b(1, 2, 4, 4, 4),)),
    ("reflection_pad2d", lambda x: F.pad(x, (1, 1, 1, 1), mode="reflect"),
     lambda: (_b(1, 2, 4, 4),)),
    ("replication_pad1d", lambda x: F.pad(x, (2, 1), mode="replicate"), lambda: (_b(1, 2, 5),)),
    ("linalg_inv", torch.linalg.inv, lambda: (_b(4, 4) + 4 * torch.eye(4, dtype=DTYPE),)),
    # run in the widest input type
    ("cat", lambda a, b: torch.cat([a, b]), lambda: (_b(8), _f(8))),
    ("stack", lambda a, b: torch.stack([a, b]), lambda: (_b(8), _f(8))),
    ("index_copy", lambda a, s: a.index_copy(0, torch.tensor([0, 2], device=a.device), s),
     lambda: (_b(4, 3), _f(2, 3))),
    # not listed: torch's own type promotion, or the input's dtype
    ("add_promotes", torch.add, lambda: (_f(8), _b(8))),
    ("eq_promotes", torch.eq, lambda: (_f(8), _b(8))),
    ("relu_keeps", torch.relu, lambda: (_f(8),)),
    ("softmax_keeps", lambda x: torch.softmax(x, -1), lambda: (_b(4, 8),)),
    ("float64_is_not_cast", torch.mm, lambda: (_f(4, 4).double(), _f(4, 4).double())),
]


@pytest.mark.parametrize(("op", "inputs"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_op_matches_eager_cpu_autocast(device, op, inputs):
    torch.manual_seed(0)
    args = inputs()
    with torch.autocast("cpu", dtype=DTYPE):
        want = op(*args)
    with torch_xla.amp.autocast(device, dtype=DTYPE):
        got = op(*[a.to(device) for a in args])
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, **_tolerance(want))


def _tolerance(want: torch.Tensor) -> dict:
    """torch's tolerance for the dtype; 16-bit results may also differ by one ulp of the
    largest value: an op such as addmm may round its product to 16 bits before the sum
    on one device and only once at the end on the other."""
    if want.dtype not in (torch.bfloat16, torch.float16):
        return {}
    ulp = torch.finfo(want.dtype).eps
    return {"rtol": 1.6e-2, "atol": float(want.abs().max()) * ulp}


def _mm_dtype(device) -> torch.dtype:
    a = torch.ones(2, 2, device=device)
    return (a @ a).dtype


def test_default_dtype_is_the_active_plugins(device):
    expected = registry.active().plugin.autocast_dtype()
    assert torch_xla.amp.autocast_mode.plugin_dtype() == expected
    with torch_xla.amp.autocast(device):
        assert _mm_dtype(device) == expected


def test_the_default_holds_in_every_thread(device):
    """torch keeps its autocast dtype per thread; the plugin's holds in new threads too."""
    seen = []

    def work():
        torch.set_autocast_dtype("xla", torch.float16)  # this thread's torch default
        with torch_xla.amp.autocast(device):
            seen.append(_mm_dtype(device))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == [registry.active().plugin.autocast_dtype()]


def test_enter_and_exit_set_torchs_xla_autocast_state(device):
    assert not torch.is_autocast_enabled("xla")
    with torch_xla.amp.autocast(device, dtype=torch.float16):
        assert torch.is_autocast_enabled("xla") and torch.is_autocast_xla_enabled()
        assert torch.get_autocast_xla_dtype() == torch.float16
        assert _mm_dtype(device) == torch.float16
        with torch_xla.amp.autocast(device, enabled=False):
            assert not torch.is_autocast_xla_enabled()
            assert _mm_dtype(device) == torch.float32
        assert torch.is_autocast_xla_enabled()
    assert not torch.is_autocast_xla_enabled()


def test_enabled_false_casts_nothing(device):
    with torch_xla.amp.autocast(device, enabled=False):
        assert _mm_dtype(device) == torch.float32


def test_works_as_a_decorator(device):
    @torch_xla.amp.autocast(device, dtype=DTYPE)
    def product():
        return _mm_dtype(device)

    assert product() == DTYPE
    assert _mm_dtype(device) == torch.float32


def test_accepts_a_device_string():
    with torch_xla.amp.autocast("xla:0", dtype=DTYPE):
        assert torch.is_autocast_enabled("xla")


@pytest.mark.parametrize("bad", ["cpu", torch.device("cpu"), "not-a-device"])
def test_rejects_devices_that_are_not_xla(bad):
    with pytest.raises(ValueError, match="for XLA devices.*torch_xla.device()"):
        torch_xla.amp.autocast(bad)


def test_an_unsupported_dtype_disables_autocast_with_a_warning(device):
    with pytest.warns(UserWarning, match="dtype is not supported. Disabling autocast"):
        context = torch_xla.amp.autocast(device, dtype=torch.float32)
    with context:
        assert not torch.is_autocast_enabled("xla")


class _Scaled(torch.autograd.Function):
    @staticmethod
    @torch_xla.amp.custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    @torch_xla.amp.custom_bwd
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad @ b.T, a.T @ grad


def test_custom_fwd_and_bwd_default_to_the_xla_device(device):
    a = torch.randn(3, 3, device=device, dtype=DTYPE, requires_grad=True)
    b = torch.randn(3, 3, device=device, requires_grad=True)
    with torch_xla.amp.autocast(device, dtype=DTYPE):
        out = _Scaled.apply(a, b)
    assert out.dtype == torch.float32  # inputs cast to float32, autocast off inside
    out.sum().backward()
    assert a.grad.dtype == DTYPE and b.grad.dtype == torch.float32


def test_a_plugin_with_float16_makes_float16_the_default():
    code = """
        import torch, torch_xla, torch_xla.amp
        import torch_xla.runtime as xr
        from torch_xla.plugins import register_plugin
        from torch_xla_cpu import CpuPlugin

        class HalfCpu(CpuPlugin):
            def autocast_dtype(self):
                return torch.float16

        register_plugin("halfcpu", HalfCpu())
        xr.set_device_type("halfcpu")
        device = torch_xla.device()
        with torch_xla.amp.autocast(device):
            a = torch.ones(2, 2, device=device)
            print((a @ a).dtype)
    """
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["torch.float16"]


def test_xla_patched_linear_runs_in_the_autocast_dtype_forward_and_backward(device):
    """`XLAPatchedLinear` (SPMD's einsum linear) under autocast computes as `F.linear` does
    under eager CPU autocast: its output and the gradients it computes come from bfloat16
    operands, both passes."""
    from torch_xla.distributed.spmd.xla_sharding import XLAPatchedLinear

    torch.manual_seed(0)
    x, w, b = torch.randn(5, 10), torch.randn(15, 10), torch.randn(15)
    with torch.autocast("cpu", dtype=DTYPE):
        ref_x, ref_w = x.clone().requires_grad_(), w.clone().requires_grad_()
        ref = F.linear(ref_x, ref_w, b)
    (ref.float() ** 2).mean().backward()
    xd, wd = x.to(device).requires_grad_(), w.to(device).requires_grad_()
    with torch.autocast("xla", dtype=DTYPE):
        out = XLAPatchedLinear.apply(xd, wd, b.to(device))
    (out.float() ** 2).mean().backward()
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([wd.grad, xd.grad])  # before they are computed
    dots = [line for line in hlo.splitlines() if " dot(" in line]
    assert len(dots) == 3 and all("dot(bf16" in line for line in dots), dots
    assert out.dtype == ref.dtype == DTYPE
    torch.testing.assert_close(out.cpu(), ref, atol=0.05, rtol=0.02)
    torch.testing.assert_close(wd.grad.cpu(), ref_w.grad, atol=0.05, rtol=0.02)
    torch.testing.assert_close(xd.grad.cpu(), ref_x.grad, atol=0.05, rtol=0.02)
