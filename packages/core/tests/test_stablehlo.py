"""`torch_xla.stablehlo`: a `torch.export` program as StableHLO, saved, loaded and run.

Reference: the model itself, eager on the CPU."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from torch import nn
from torch.export import export

import torch_xla
from torch_xla.stablehlo import (
    InputLocation,
    StableHLOExportOptions,
    StableHLOGraphModule,
    VariableType,
    exported_program_to_stablehlo,
    save_as_stablehlo,
    save_torch_model_as_stablehlo,
)

TOLERANCE = dict(rtol=1e-5, atol=1e-6)


class Net(nn.Module):
    """Parameters, buffers (one not persistent), a lifted tensor constant, Python scalars,
    two outputs, and an input it never reads."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(4, 3)
        self.bn = nn.BatchNorm1d(3)
        self.register_buffer("offset", torch.arange(3.0), persistent=False)

    def forward(self, x, y, unused):
        h = torch.relu(self.bn(self.fc(x))) * 0.5 + y.sum() + self.offset
        return h, self.fc.weight.t() @ torch.ones(3) / torch.tensor(3.0)


def _net_and_inputs():
    net = Net().eval()
    with torch.no_grad():  # statistics that are not the identity
        net.bn.running_mean.uniform_(-1, 1)
        net.bn.running_var.uniform_(0.5, 2)
    generator = torch.Generator().manual_seed(1)
    return net, (torch.randn(5, 4, generator=generator), torch.randn(2, generator=generator),
                 torch.randn(7, generator=generator))


def _close(got, want):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.device.type == "xla"
        torch.testing.assert_close(g.cpu(), w.detach(), **TOLERANCE)


def test_the_exported_program_runs_as_stablehlo_on_the_device():
    net, inputs = _net_and_inputs()
    exported = export(net, inputs)
    shlo = exported_program_to_stablehlo(exported)
    text = shlo.get_stablehlo_text()
    assert "func.func public @main" in text and "stablehlo.dot_general" in text
    assert shlo.get_stablehlo_bytecode().startswith(b"ML\xefR")  # MLIR bytecode
    device = torch_xla.device()
    _close(shlo(*[t.to(device) for t in inputs]), net(*inputs))
    _close(shlo(*inputs), net(*inputs))  # CPU tensors are copied to the device
    meta = shlo._bundle.stablehlo_funcs[0].meta
    # The weights the graph reads, in the program's order, then the user inputs it reads.
    order = [spec.target for spec in exported.run_decompositions().graph_signature.input_specs
             if spec.target not in (None, "bn.num_batches_tracked")]
    assert [loc.name for loc in meta.input_locations[:-2]] == order
    assert sorted(order) == ["bn.bias", "bn.running_mean", "bn.running_var", "bn.weight",
                             "fc.bias", "fc.weight", "lifted_tensor_0", "offset"]
    assert meta.input_locations[-2:] == [InputLocation.input_arg(0), InputLocation.input_arg(1)]
    assert [(loc.position, sig.shape) for loc, sig in meta.unused_inputs] == [(2, [7])]
    assert [s.shape for s in meta.output_signature] == [[5, 3], [4]]
    assert {s.dtype for s in meta.input_signature} == {"float32"}


def test_a_dtype_cast_exports_with_its_metadata_check():
    """`torch.export` puts `aten._assert_tensor_metadata` before a `.to(dtype)`; the
    check is made when the program is recorded and lowers to nothing."""

    class Cast(nn.Module):
        def forward(self, x):
            return torch.ops.aten.ne.Scalar(x, 1).to(torch.int32), x.to(torch.float16)

    x = torch.randint(0, 3, (3, 5))
    exported = export(Cast(), (x,))
    assert "_assert_tensor_metadata" in exported.graph_module.code
    shlo = exported_program_to_stablehlo(exported)
    got = shlo(x)
    for g, w in zip(got, Cast()(x), strict=True):
        assert g.dtype == w.dtype and torch.equal(g.cpu(), w)
    xx = x.to(torch_xla.device())
    torch.ops.aten._assert_tensor_metadata(xx, [3, 5], dtype=torch.int64)
    with pytest.raises(RuntimeError, match=r"Tensor dtype mismatch! Expected: torch.int32"):
        torch.ops.aten._assert_tensor_metadata(xx, dtype=torch.int32)
    with pytest.raises(RuntimeError, match=r"Tensor sizes mismatch! Expected: \[3, 4\]"):
        torch.ops.aten._assert_tensor_metadata(xx, [3, 4])


def test_dynamic_dimensions_are_exported_at_the_example_size_with_a_warning():
    """`torch.export` with a `Dim` makes a dimension dynamic; the export traces the
    example inputs, so the StableHLO takes the example's size only, and says so."""
    import warnings

    from torch.export import Dim

    class Bmm(nn.Module):
        def forward(self, a, b):
            return torch.bmm(a, b)

    a, b = torch.rand(4, 3, 5), torch.rand(4, 5, 2)
    batch = Dim("batch")
    exported = export(Bmm(), (a, b), dynamic_shapes=({0: batch}, {0: batch}))
    with pytest.warns(UserWarning, match=r"dynamic dimensions \(a dims \[0\]; b dims \[0\]\)"):
        shlo = exported_program_to_stablehlo(exported)
    assert "tensor<4x3x5xf32>" in shlo.get_stablehlo_text()
    torch.testing.assert_close(shlo(a, b).cpu(), torch.bmm(a, b))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a static program: not a word
        exported_program_to_stablehlo(export(Bmm(), (a, b)))


def test_a_saved_bundle_loads_and_runs_as_the_model(tmp_path):
    net, inputs = _net_and_inputs()
    save_as_stablehlo(export(net, inputs), tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["constants", "data", "functions"]
    assert sorted(os.listdir(tmp_path / "functions")) == [
        "forward.bytecode", "forward.meta", "forward.mlir"]
    assert os.listdir(tmp_path / "constants") == []
    state = dict(net.state_dict())
    for name, value in state.items():
        np.testing.assert_array_equal(np.load(tmp_path / "data" / name), value.numpy())
    meta = json.loads((tmp_path / "functions" / "forward.meta").read_text())
    assert meta["name"] == "forward" and meta["input_locations"][0] == {
        "type_": "parameter", "position": -1, "name": "fc.weight"}
    loaded = StableHLOGraphModule.load(tmp_path)
    assert loaded.get_stablehlo_text() == (tmp_path / "functions" / "forward.mlir").read_text()
    _close(loaded(*inputs), net(*inputs))
    other = tuple(torch.randn_like(t) for t in inputs)  # not the tracing values
    _close(loaded(*other), net(*other))


def test_save_torch_model_traces_with_the_given_arguments(tmp_path):
    net, inputs = _net_and_inputs()
    batch = (torch.randn(9, 4), inputs[1], inputs[2])
    save_torch_model_as_stablehlo(net, batch, tmp_path)
    loaded = StableHLOGraphModule.load(tmp_path)
    assert loaded._bundle.stablehlo_funcs[0].meta.output_signature[0].shape == [9, 3]
    _close(loaded(*batch), net(*batch))
    assert torch_xla.save_torch_model_as_stablehlo is save_torch_model_as_stablehlo
    assert torch_xla.save_as_stablehlo is save_as_stablehlo


def test_without_saved_weights_the_bundle_has_none(tmp_path):
    net, inputs = _net_and_inputs()
    save_as_stablehlo(export(net, inputs), tmp_path, StableHLOExportOptions(save_weights=False))
    assert not (tmp_path / "data").exists()
    loaded = StableHLOGraphModule.load(tmp_path)
    assert loaded._bundle.state_dict == {}
    with pytest.raises(KeyError, match="fc.weight"):
        loaded(*inputs)


def test_constants_can_be_arguments_kept_in_the_bundle(tmp_path):
    net, inputs = _net_and_inputs()
    options = StableHLOExportOptions(inline_all_constant=False)
    save_as_stablehlo(export(net, inputs), tmp_path, options)
    # the Python scalars 0.5 is fed as a device scalar, so it is a constant argument
    constants = sorted(os.listdir(tmp_path / "constants"), key=int)
    assert constants and [float(np.load(tmp_path / "constants" / c)) for c in constants]
    meta = StableHLOGraphModule.load(tmp_path)._bundle.stablehlo_funcs[0].meta
    kinds = [loc.type_ for loc in meta.input_locations]
    assert kinds.count(VariableType.CONSTANT) == len(constants)
    _close(StableHLOGraphModule.load(tmp_path)(*inputs), net(*inputs))


def test_nested_inputs_and_outputs_keep_their_structure():
    class Dicts(nn.Module):
        def forward(self, inputs):
            return {"sum": inputs["a"] + inputs["b"][0], "prod": inputs["a"] * inputs["b"][1]}

    inputs = ({"a": torch.randn(3), "b": [torch.randn(3), torch.randn(3)]},)
    shlo = exported_program_to_stablehlo(export(Dicts(), inputs))
    got = shlo(*inputs)
    want = Dicts()(*inputs)
    assert sorted(got) == ["prod", "sum"]
    for key in want:
        _close(got[key], want[key])


def test_bfloat16_weights_round_trip(tmp_path):
    torch.manual_seed(0)
    layer = nn.Linear(4, 3).to(torch.bfloat16)
    x = torch.randn(2, 4, dtype=torch.bfloat16)
    save_as_stablehlo(export(layer, (x,)), tmp_path)
    got = StableHLOGraphModule.load(tmp_path)(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.cpu(), layer(x).detach(), rtol=1.6e-2, atol=1e-2)


def test_an_op_without_lowering_fails_the_export_with_its_name():
    class Median(nn.Module):
        def forward(self, x):
            return x - x.median()  # median of all elements runs on the CPU

    with pytest.raises(RuntimeError, match="aten::median ran on the CPU"):
        exported_program_to_stablehlo(export(Median(), (torch.randn(5),)))


def test_unsupported_options_and_folders_are_refused(tmp_path):
    net, inputs = _net_and_inputs()
    with pytest.raises(NotImplementedError, match="export_node_metadata"):
        exported_program_to_stablehlo(export(net, inputs), StableHLOExportOptions(
            export_node_metadata=True))
    with pytest.raises(FileNotFoundError, match="not a StableHLO bundle"):
        StableHLOGraphModule.load(tmp_path)
    shlo = exported_program_to_stablehlo(export(net, inputs))
    with pytest.raises(KeyError, match="no StableHLO function 'backward'"):
        shlo.get_stablehlo_text("backward")
    for device in ("cpu", torch_xla.device()):
        with pytest.raises(ValueError, match=r"takes float32\[5, 4\] here, got float32\[6, 4\]"):
            shlo(torch.randn(6, 4, device=device), *inputs[1:])


def test_a_training_mode_batch_norm_returns_its_output_not_its_buffer_updates():
    # The graph reads the running statistics only for their updates, which are not
    # returned: the module still takes every argument its metadata names.
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.AdaptiveAvgPool2d(1)).train()
    x = torch.randn(2, 3, 8, 8)
    want = net(x).detach()  # before export: the statistics the export reads
    shlo = exported_program_to_stablehlo(export(net, (x,)))
    meta = shlo._bundle.stablehlo_funcs[0].meta
    assert len(meta.output_signature) == 1
    assert text_arguments(shlo.get_stablehlo_text()) == len(meta.input_locations)
    _close(shlo(x), want)


def text_arguments(text: str) -> int:
    header = next(line for line in text.splitlines() if "func.func public @main" in line)
    return header.split("->")[0].count("%arg")
