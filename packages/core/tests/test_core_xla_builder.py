"""PyTorch/XLA's XLA-builder API (`xb.Op`, `create_computation`) and `xor.register`:
PyTorch ops written as XLA computations. Reference: the same computation in PyTorch
eager on the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_builder as xb
import torch_xla.core.xla_op_registry as xor


def run(name, opfn, *tensors, **kwargs):
    device = torch_xla.device()
    out = xor.register(name, opfn)(*(t.to(device) for t in tensors), **kwargs)
    return [o.cpu() for o in out] if isinstance(out, list) else out.cpu()


def close(actual, expected, tol=1e-5):
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol)


def test_arithmetic_and_comparisons_match_eager():
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    close(run("arith", lambda x, y: (x + y) * x - y / (x.exp() + y.exp()), a, b),
          (a + b) * a - b / (a.exp() + b.exp()))
    close(run("matmul", lambda x, y: x @ y.transpose([1, 0]), a, b), a @ b.T)
    mask = run("cmp", lambda x, y: x > y, a, b)
    assert mask.dtype == torch.bool and torch.equal(mask, a > b)
    close(run("unary", lambda x: x.tanh().max(x.sin()).min(x.cos()) + x.floor(), a),
          torch.minimum(torch.maximum(a.tanh(), a.sin()), a.cos()) + a.floor())
    i, j = torch.tensor([12, -7, 5]), torch.tensor([1, 2, 3])
    assert torch.equal(run("shift", lambda x, y: (x << y) + (x >> y), i, j),
                       (i << j) + (i >> j))


def test_a_tuple_result_is_a_list_of_tensors_with_their_dtypes():
    a = torch.randn(2, 3)
    result, cast = run("mixed_tuple", lambda x: xb.Op.tuple((x, x.cast(xb.Type.BF16))), a)
    assert result.dtype == torch.float32 and cast.dtype == torch.bfloat16
    assert torch.equal(result, a) and torch.equal(cast, a.bfloat16())


def test_shapes_and_data_movement_match_eager():
    a = torch.arange(24.).reshape(2, 3, 4)
    close(run("reshape", lambda x: x.reshape([6, 4]), a), a.reshape(6, 4))
    close(run("slice", lambda x: x.slice([0, 1, 0], [2, 3, 4], [1, 1, 2]), a), a[:, 1:3, ::2])
    close(run("slice_in_dim", lambda x: x.slice_in_dim(1, 3, dimno=2), a), a[:, :, 1:3])
    close(run("pad", lambda x: x.pad(xb.Op.scalar(x.builder(), -1.0),
                                      [(0, 0, 0), (1, 0, 0), (0, 2, 1)]), a),
          _pad_interior(a))
    close(run("rev", lambda x: x.rev([0, 2]), a), a.flip(0, 2))
    close(run("broadcast", lambda x: x.broadcast([5]), a), a.expand(5, 2, 3, 4))
    close(run("concat", lambda x: xb.Op.concat_in_dim([x, x * x], 1), a),
          torch.cat([a, a * a], 1))
    close(run("select", lambda x: (x > x.scalar_like(5.0)).select(x, x.zeros_like()), a),
          torch.where(a > 5, a, 0.))
    close(run("clamp", lambda x: x.clamp(xb.Op.scalar(x.builder(), 2.0),
                                         xb.Op.scalar(x.builder(), 9.0)), a),
          a.clamp(2, 9))
    iota = run("iota", lambda x: xb.Op.iota(x.builder(), xb.mkshape(xb.Type.S32, (2, 3)), 1)
               + x.cast(xb.Type.S32), torch.zeros(2, 3))
    assert iota.dtype == torch.int32 and torch.equal(iota, torch.arange(3).expand(2, 3).int())
    start = torch.tensor(1, dtype=torch.int32)
    close(run("dyn_slice", lambda x, s: x.dynamic_slice([s, s, s], [1, 2, 2]), a, start),
          a[1:2, 1:3, 1:3])


def _pad_interior(a):
    out = torch.full((2, 4, 9), -1.)
    out[:, 1:, 0:7:2] = a
    return out


def test_reductions_take_python_computations():
    a = torch.randn(4, 6)
    close(run("reduce", lambda x: x.reduce(xb.Op.scalar(x.builder(), 0.0),
                                           lambda p, q: p + q, [1]), a), a.sum(1))
    close(run("reduce_all", lambda x: x.reduce_all(xb.Op.scalar(x.builder(), -1e9),
                                                   lambda p, q: p.max(q)), a), a.max())
    image = torch.randn(1, 2, 6, 6)
    close(run("window", lambda x: x.reduce_window(xb.Op.scalar(x.builder(), 0.0),
                                                  lambda p, q: p + q, [1, 1, 2, 2],
                                                  [1, 1, 2, 2]), image),
          F.avg_pool2d(image, 2) * 4)
    close(run("max_pool", lambda x: x.max_pool([3, 3], [2, 2], 0, 1, [2, 3]), image),
          F.max_pool2d(image, 3, 2))


def test_convolution_matches_eager():
    image, kernel = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    close(run("conv", lambda x, k: x.conv(k, [1, 1], padding="same"), image, kernel),
          F.conv2d(image, kernel, padding=1), tol=1e-4)
    close(run("conv_dilated",
              lambda x, k: x.conv_general_dilated(k, [2, 2], [(1, 1), (1, 1)], [1, 1], [2, 2],
                                                  0, 1, 1, 0, 0, 1, [2, 3], [2, 3], [2, 3]),
              image, kernel),
          F.conv2d(image, kernel, stride=2, padding=1, dilation=2), tol=1e-4)


def test_conditional_and_while_loop():
    def choose(k, a, b, k0=None):
        cond = k > xb.Op.scalar(k.builder(), k0, dtype=k.shape().dtype)
        return cond.mkconditional((a, b), lambda x, y: x + y, lambda x, y: x - y)

    k, a, b = torch.tensor(0.2), torch.randn(2, 2), torch.randn(2, 2)
    close(run("cond", choose, k, a, b, k0=0.1), a + b)
    close(run("cond", choose, k, a, b, k0=0.9), a - b)

    def repeat_add(a, b, limit=None):
        def cond(counter, a, b):
            return counter < xb.Op.scalar(counter.builder(), limit, dtype=xb.Type.S32)

        def body(counter, a, b):
            one = xb.Op.scalar(counter.builder(), 1, dtype=xb.Type.S32)
            return xb.Op.tuple((counter + one, a + b, b))

        zero = xb.Op.scalar(a.builder(), 0, dtype=xb.Type.S32)
        return xb.Op.mkwhile((zero, a, b), cond, body).get_tuple_element(1)

    expected = a.clone()
    for _ in range(10):
        expected = expected + b
    close(run("while", repeat_add, a, b, limit=10), expected)


def test_linear_algebra_sort_and_map():
    a = torch.randn(3, 3).triu() + 3 * torch.eye(3)
    b = torch.randn(3, 2)
    close(run("trsm", lambda x, y: x.triangualr_solve(y, left_side=True, lower=False,
                                                       unit_diagonal=False,
                                                       transpose_a=False), a, b),
          torch.linalg.solve_triangular(a, b, upper=True), tol=1e-4)
    v = torch.randn(5)
    close(run("sort", lambda x: xb.Op.sort([x]), v), v.sort().values)
    close(run("map", lambda x, y: xb.Op.map([x, y], lambda p, q: p * q + p, [0]), v, v),
          v * v + v)


def test_computations_are_made_once_per_signature(capfd, monkeypatch):
    op = xor.register("cached", lambda x, scale=1.0: x * xb.Op.scalar(x.builder(), scale))
    device = torch_xla.device()
    for _ in range(2):
        close(op(torch.ones(2, device=device), scale=2.0).cpu(), torch.full((2,), 2.0))
    assert len(op._computations) == 1
    monkeypatch.setenv("XLA_OP_PRINT_COMPUTATIONS", "1")
    close(op(torch.ones(3, device=device), scale=3.0).cpu(), torch.full((3,), 3.0))
    assert len(op._computations) == 2
    printed = capfd.readouterr().err
    assert "HloModule" in printed and "multiply" in printed


def test_create_computation_and_its_hlo():
    shape = xb.mkshape(xb.Type.F32, (2, 3))
    computation = xb.create_computation("add_one", lambda x: x + x.ones_like(), [shape])
    assert computation.result_shape == shape
    text = xb.get_computation_hlo(computation)
    assert "HloModule" in text and "add_one" in text and "add(" in text
    assert xb.tensor_shape(torch.zeros(4, 5, dtype=torch.int8)).shape == {
        "type": "s8", "sizes": (4, 5)}
    tuple_shape = xb.Shape([shape.shape, shape.shape])
    assert tuple_shape.is_tuple() and tuple_shape.tuple_size() == 2


def test_mistakes_get_clear_errors():
    with pytest.raises(TypeError, match="expected an xb.Op operand, got float"):
        run("bad_operand", lambda x: x + 1.0, torch.ones(2))
    with pytest.raises(ValueError, match="not a tuple"):
        run("bad_tuple", lambda x: x.get_tuple_element(0), torch.ones(2))
    with pytest.raises(TypeError, match="must return an xb.Op"):
        run("bad_result", lambda x: 3, torch.ones(2))
    with pytest.raises(ValueError, match="unknown XLA builder operation 'Frobnicate'"):
        run("bad_name", lambda x: xb.mkop("Frobnicate", [x.op]), torch.ones(2))
    with pytest.raises(ValueError, match="parameters exist only while create_computation"):
        xb.mkparam(xb.create_builder("b"), 0, xb.mkshape(xb.Type.F32, (2,)))
    with pytest.raises(ValueError, match="unknown XLA element type 'f8'"):
        run("bad_type", lambda x: x.cast("f8"), torch.ones(2))
    with pytest.raises(TypeError, match="keyword arguments must be picklable"):
        xor.register("bad_kwargs", lambda x, f=None: x)(torch.ones(2, device="xla"),
                                                         f=lambda: 0)
    with pytest.raises(RuntimeError, match="not an XLA tensor"):
        xor.register("cpu_input", lambda x: x)(torch.ones(2))


def test_placeholder_tensors_trace_graphs_without_data():
    """`create_placeholder_tensor`: a shape and dtype on the device, no value; a graph over
    placeholders lowers with them as parameters, and nothing is copied to the device."""
    import torch_xla.debug.metrics as met

    met.clear_all()
    p1 = xb.create_placeholder_tensor((2, 3), torch.bfloat16)
    p2 = xb.create_placeholder_tensor((3, 4), torch.bfloat16)
    assert p1.device == torch_xla.device() and p1.dtype == torch.bfloat16
    assert p1.shape == (2, 3) and torch_xla._XLAC._is_placeholder(p1)
    h1, h2 = torch_xla._XLAC._get_tensors_handle([p1, p2])
    assert h1 != h2
    b = (torch.sin(p1) @ p2) @ p2.T
    assert torch_xla._XLAC._get_xla_tensors_text([b]).count("xla::device_data()") == 2
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([b])
    assert "(bf16[3,4]{1,0}, bf16[2,3]{1,0})->(bf16[2,3]{1,0})" in hlo.splitlines()[0]
    assert not met.metric_data("TransferToDeviceTime")
    with pytest.raises(RuntimeError, match="placeholder tensor .* has no value"):
        p1.cpu()
    del b  # a pending value over a placeholder cannot be synced
