"""XLA custom calls: `torch_xla.experimental.stablehlo_custom_call` and
`_XLAC._xla_custom_call` (`lazy/custom_call.py`,
`lowering/custom_call.py`).

The kernel the programs call is a real XLA CPU custom-call target this file registers
with jax (a C function pointer made by ctypes around numpy code, XLA's API version 3:
outputs, inputs, the backend config and a status). Reference for every number: the same
computation in eager PyTorch on the CPU."""

from __future__ import annotations

import ctypes
import pathlib

import jax
import numpy as np
import pytest
import torch
from conftest import run_spmd

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla.experimental.stablehlo_custom_call import (
    extract_custom_call_outputs_shape_dtype,
    place_to_device,
    place_to_host,
    stablehlo_custom_call,
)

TARGET = "torch_xla_test_axpy_rowsum"
SHAPE = (2, 3)

# void kernel(void* out, const void** in, const char* opaque, size_t opaque_len,
#             XlaCustomCallStatus* status): XLA:CPU's API_VERSION_STATUS_RETURNING_UNIFIED
_KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                           ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p)


def _buffer(address: int, shape: tuple) -> np.ndarray:
    return np.ctypeslib.as_array(ctypes.cast(address, ctypes.POINTER(ctypes.c_float)), shape)


def _axpy_rowsum(out, ins, opaque, opaque_len, status):
    """out[0] = a * x + y, out[1] = its row sums; `a` is the backend config."""
    a = float(ctypes.string_at(opaque, opaque_len))
    x, y = _buffer(ins[0], SHAPE), _buffer(ins[1], SHAPE)
    outs = ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))  # several outputs: a tuple
    result = _buffer(outs[0], SHAPE)
    result[:] = a * x + y
    _buffer(outs[1], SHAPE[:1])[:] = result.sum(axis=1)


_CALLBACK = _KERNEL(_axpy_rowsum)  # kept alive for the process: XLA holds the pointer


def _register() -> None:
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
    capsule = new_capsule(ctypes.cast(_CALLBACK, ctypes.c_void_p).value,
                          b"xla._CUSTOM_CALL_TARGET", None)
    jax.ffi.register_ffi_target(TARGET, capsule, platform="cpu", api_version=0)


_register()


def _axpy_rowsum_call(x, y, a="2.5"):
    return stablehlo_custom_call([x, y], TARGET, [SHAPE, SHAPE[:1]],
                                 [torch.float32, torch.float32], backend_config=a,
                                 api_version=3)


def test_a_registered_kernel_computes_in_the_program_as_eager_does():
    torch.manual_seed(0)
    x, y = torch.randn(SHAPE), torch.randn(SHAPE)
    dev = torch_xla.device()
    xx, yy = x.to(dev), y.to(dev)
    out, sums = _axpy_rowsum_call(torch.tanh(xx), yy * 2)
    out = out + 1  # the custom call's outputs feed ordinary ops
    expected = 2.5 * torch.tanh(x) + y * 2
    torch.testing.assert_close(out.cpu(), expected + 1)
    torch.testing.assert_close(sums.cpu(), expected.sum(dim=1))
    assert out.device == dev and not out.requires_grad


def test_the_same_call_again_reuses_its_program_and_another_config_makes_another():
    dev = torch_xla.device()
    x, y = torch.ones(SHAPE), torch.arange(6.).reshape(SHAPE)
    out, _ = _axpy_rowsum_call(x.to(dev), y.to(dev))
    out.cpu()
    compiled = met.counter_value("UncachedCompile")
    out, _ = _axpy_rowsum_call(x.to(dev), y.to(dev))
    assert torch.equal(out.cpu(), 2.5 + y)
    assert met.counter_value("UncachedCompile") == compiled
    out, _ = _axpy_rowsum_call(x.to(dev), y.to(dev), a="-1")
    assert torch.equal(out.cpu(), y - 1)
    assert met.counter_value("UncachedCompile") == compiled + 1


def test_the_stablehlo_carries_the_call_as_given():
    dev = torch_xla.device()
    x = torch.ones(3, 3, device=dev)
    out = stablehlo_custom_call((x,), "custom_op3", [x.shape[1:]], [torch.int8], True,
                                "backend_config", 3, {"mode": "fast"})
    assert out.shape == (3,) and out.dtype == torch.int8
    text = xm.get_stablehlo([out])
    (line,) = [s for s in text.splitlines() if "stablehlo.custom_call" in s]
    assert "@custom_op3(" in line and "(tensor<3x3xf32>) -> tensor<3xi8>" in line, line
    for part in ('backend_config = "backend_config"', "has_side_effect = true",
                 "api_version = 3 : i32", 'mhlo.frontend_attributes = {mode = "fast"}'):
        assert part in line, (part, line)
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([out])
    assert 'custom_call_target="custom_op3"' in hlo and 'backend_config="backend_config"' in hlo


def test_placement_annotations_round_trip_through_host_memory():
    x = torch.arange(12.).reshape(3, 4)
    xx = x.to(torch_xla.device())
    y = place_to_device(place_to_host(xx * 2)) + 1
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([y])
    placements = [s for s in hlo.splitlines() if "annotate_device_placement" in s]
    assert len(placements) == 2, hlo
    assert '_xla_buffer_placement="pinned_host"' in placements[0]
    assert '_xla_buffer_placement="device"' in placements[1]
    assert all("custom_call_has_side_effect=true" in s for s in placements)
    assert torch.equal(y.cpu(), x * 2 + 1)


def test_output_shapes_and_dtypes_come_from_an_fx_nodes_values():
    graph = torch.fx.experimental.proxy_tensor.make_fx(
        lambda a: torch.max(a, dim=1), tracing_mode="fake")(torch.randn(4, 5))
    (node,) = [n for n in graph.graph.nodes if n.target is torch.ops.aten.max.dim]
    shapes, dtypes = extract_custom_call_outputs_shape_dtype(node)
    assert [tuple(s) for s in shapes] == [(4,), (4,)]
    assert list(dtypes) == [torch.float32, torch.int64]
    (placeholder,) = [n for n in graph.graph.nodes if n.op == "placeholder"]
    placeholder.meta.pop("val")
    with pytest.raises(ValueError, match="no 'val' metadata"):
        extract_custom_call_outputs_shape_dtype(placeholder)


def test_an_unknown_kernel_fails_at_compile_naming_it():
    x = torch.ones(2, device=torch_xla.device())
    out = stablehlo_custom_call([x], "no_such_kernel_anywhere", [(2,)], [torch.float32])
    with pytest.raises(Exception, match="no_such_kernel_anywhere") as caught:
        out.cpu()
    assert "names a kernel no one registered for the" in str(caught.value)


@pytest.mark.parametrize("call, error, words", [
    (lambda x: stablehlo_custom_call([x.cpu()], "k", [(2,)], [torch.float32]),
     RuntimeError, "not an XLA tensor"),
    (lambda x: stablehlo_custom_call([x], "k", [(2,), (3,)], [torch.float32]),
     ValueError, "2 output shapes but 1 output dtypes"),
    (lambda x: stablehlo_custom_call([x], "k", [], []), ValueError, "at least one output"),
    (lambda x: stablehlo_custom_call([x], "k", [(2,)], ["float32"]), TypeError,
     "torch dtypes"),
    (lambda x: stablehlo_custom_call([x], "k", [(-1,)], [torch.float32]), ValueError,
     "negative size"),
    (lambda x: stablehlo_custom_call([x], "k", [(2,)], [torch.float32], api_version=7),
     ValueError, "api_version must be one of"),
    (lambda x: stablehlo_custom_call([x], "", [(2,)], [torch.float32]), ValueError,
     "call_target"),
    (lambda x: stablehlo_custom_call([x], "k", [(2,)], [torch.float32],
                                     frontend_attributes={"a": 1}), TypeError,
     "strings to strings"),
])
def test_bad_calls_say_what_is_wrong(call, error, words):
    x = torch.ones(2, device=torch_xla.device())
    with pytest.raises(error, match=words):
        call(x)


# --- custom ops kept as custom calls in exported StableHLO ---------------------------------

_LIB = torch.library.Library("torch_xla_test_kernels", "DEF")
_LIB.define("scale(Tensor x) -> Tensor")
_LIB.define("split_rows(Tensor x, Tensor y) -> (Tensor, Tensor)")
_LIB.define("times(Tensor x, int n) -> Tensor")
torch.library.impl(_LIB, "scale", "Meta")(lambda x: torch.empty_like(x))
torch.library.impl(_LIB, "split_rows", "Meta")(
    lambda x, y: (torch.empty_like(x), torch.empty(y.shape[1:], device="meta")))
torch.library.impl(_LIB, "times", "Meta")(lambda x, n: torch.empty_like(x))
_OPS = torch.ops.torch_xla_test_kernels


def _exported_text(fn, *inputs, allowed=("torch_xla_test_kernels",)):
    from torch_xla.stablehlo import StableHLOExportOptions, exported_program_to_stablehlo

    class M(torch.nn.Module):
        def forward(self, *args):
            return fn(*args)

    options = StableHLOExportOptions(custom_ops_allowed_in_graph=set(allowed))
    return exported_program_to_stablehlo(torch.export.export(M(), inputs),
                                         options).get_stablehlo_text()


def test_allowed_custom_ops_are_exported_as_custom_calls_named_after_them():
    text = _exported_text(lambda x: torch.sin(_OPS.scale(torch.cos(x))), torch.randn(3, 3))
    (line,) = [s for s in text.splitlines() if "stablehlo.custom_call" in s]
    assert "@torch_xla_test_kernels.scale.default(" in line, line
    assert "(tensor<3x3xf32>) -> tensor<3x3xf32>" in line, line
    assert "stablehlo.cosine" in text and "stablehlo.sine" in text


def test_an_allowed_op_with_several_outputs_returns_a_tuple_as_upstream():
    text = _exported_text(lambda x, y: _OPS.split_rows(x, y), torch.randn(3, 3),
                          torch.randn(5, 5))
    (line,) = [s for s in text.splitlines() if "stablehlo.custom_call" in s]
    assert "@torch_xla_test_kernels.split_rows.default(" in line, line
    assert "-> tuple<tensor<3x3xf32>, tensor<5xf32>>" in line, line
    assert text.count("stablehlo.get_tuple_element") == 2


def test_an_allowed_op_with_an_argument_that_is_not_a_tensor_is_refused():
    with pytest.raises(ValueError, match="not tensors"):
        _exported_text(lambda x: _OPS.times(x, 3), torch.randn(2))


def test_a_kernel_called_in_an_spmd_program_sees_whole_operands_and_its_output_is_laid_out():
    """In SPMD mode the partitioner gives a custom call it knows nothing of whole operands
    (a sharded input is gathered first); its outputs then take the layouts marked on
    them. Values equal eager, each device holding its tile. Inside a manual region the
    kernel runs on each device's tile instead."""
    out = run_spmd(f"""
import sys
sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
import numpy as np, torch, torch_xla
import torch_xla.runtime as xr, torch_xla.distributed.spmd as xs
from test_custom_call import SHAPE, _axpy_rowsum_call
xr.use_spmd()
mesh = xs.Mesh(np.arange(4), (2, 2), ("a", "b"))
torch.manual_seed(0)
x, y = torch.randn(SHAPE), torch.randn(SHAPE)
xx, yy = x.to("xla"), y.to("xla")
xs.mark_sharding(xx, mesh, ("a", None))
out, sums = _axpy_rowsum_call(torch.tanh(xx), yy * 2)
xs.mark_sharding(out, mesh, ("a", None))
out = out + 1
torch_xla.sync()
expected = 2.5 * torch.tanh(x) + y * 2
torch.testing.assert_close(out.cpu(), expected + 1)
torch.testing.assert_close(sums.cpu(), expected.sum(dim=1))
assert torch_xla._XLAC._get_xla_sharding_spec(out) == (
    "{{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}}")
assert [tuple(s.data.shape) for s in xs.XLAShardedTensor(out).local_shards] == [(1, 3)] * 4
# In a manual region each device calls the kernel on its own tile: (4, 3) split in 2.
x, y = torch.randn(4, 3), torch.randn(4, 3)
xx, yy = x.to("xla"), y.to("xla")
xs.mark_sharding(xx, mesh, ("a", None)); xs.mark_sharding(yy, mesh, ("a", None))
tiles = [xs.enable_manual_sharding(t, ("a", None), mesh=mesh).global_tensor for t in (xx, yy)]
assert tiles[0].shape == SHAPE
out, sums = _axpy_rowsum_call(*tiles)
out = xs.disable_manual_sharding(out, ("a", None), (4, 3), mesh=mesh).global_tensor
sums = xs.disable_manual_sharding(sums, ("a",), (4,), mesh=mesh).global_tensor
torch.testing.assert_close(out.cpu(), 2.5 * x + y)
torch.testing.assert_close(sums.cpu(), (2.5 * x + y).sum(dim=1))
print("ok")
""")
    assert out.strip().endswith("ok"), out
