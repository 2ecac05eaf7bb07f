"""StableHLO composites: `torch.ops.xla.mark_tensor` and `StableHLOCompositeBuilder`
(`experimental/xla_marker.py`, `experimental/mark_pattern_utils.py`), grouped by
`lazy/composite.py` and emitted by `lowering/composite.py`, through both export paths
(`xm.get_stablehlo` on lazy tensors, `exported_program_to_stablehlo` on `torch.export`
programs) and in the programs the engine runs.

Reference for every number: the same function eager on the CPU (where the mark is a copy)."""

from __future__ import annotations

import json
import re

import pytest
import torch
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla.experimental import eager, xla_marker
from torch_xla.experimental.mark_pattern_utils import StableHLOCompositeBuilder
from torch_xla.lazy.composite import CompositeError
from torch_xla.lowering.composite import attribute_kind
from torch_xla.stablehlo import exported_program_to_stablehlo
from torch_xla.utils.stablehlo_test_utils import has_tf_package, wrap_func_as_nn_module

mark = torch.ops.xla.mark_tensor
TOLERANCE = dict(rtol=1e-5, atol=1e-6)


def _device(*tensors):
    return [t.to(torch_xla.device()) for t in tensors]


def _functions(text: str) -> dict[str, str]:
    """Each `func.func` of a StableHLO module by name, its body's text."""
    found = {}
    for match in re.finditer(r"func\.func (?:public |private )?@([\w.]+)\((.*?)\n  \}",
                             text, re.DOTALL):
        found[match.group(1)] = match.group(2)
    return found


def _lazy_stablehlo(fn, *inputs):
    outs = fn(*_device(*inputs))
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    return xm.get_stablehlo(outs)


def _check_against_cpu(fn, *inputs):
    """`fn` run on the device (compiled, marks and all) equals `fn` on the CPU."""
    want = fn(*inputs)
    got = fn(*_device(*inputs))
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.cpu(), w, **TOLERANCE)


def basic(x):
    x = x + 1
    x = mark(x, "test.p", 0, "0", True)
    x = x * 3
    return mark(x, "test.p", 0, "0", False)


def two_in_two_out(x, y):
    x = mark(x, "test.p", 0, "0", True)
    y = mark(y, "test.p", 1, "0", True)
    a, b = x + y, x * y
    return mark(a, "test.p", 0, "0", False), mark(b, "test.p", 1, "0", False)


def nested(x):
    x = mark(x, "test.outer", 0, "0", True)
    x = x.sin()
    x = mark(x, "test.inner", 0, "0", True)
    x = x.exp()
    x = mark(x, "test.inner", 0, "0", False)
    x = x * 2
    return mark(x, "test.outer", 0, "0", False)


def tangent(x):
    """The inner pattern's output is unused; the outer one reads an op inside it."""
    x = mark(x, "test.outer", 0, "0", True)
    x = x + 1
    x = mark(x, "test.inner", 0, "0", True)
    x = x.cos()
    y = x - 1
    inner_out = mark(x, "test.inner", 0, "0", False)
    return inner_out, mark(y, "test.outer", 0, "0", False)


def escaping(x):
    """An op inside the pattern is also read outside it, unmarked."""
    x = mark(x, "test.p", 0, "0", True)
    hidden = x.tanh()
    out = mark(hidden * 2, "test.p", 0, "0", False)
    return out + hidden


# --- the lazy path: xm.get_stablehlo ------------------------------------------------------


def test_a_marked_region_is_one_composite_whose_ops_are_in_its_decomposition_only():
    text = _lazy_stablehlo(basic, torch.randn(5))
    assert text.count('stablehlo.composite "test.p"') == 1
    assert "{decomposition = @test.p.impl}" in text
    functions = _functions(text)
    assert "stablehlo.multiply" in functions["test.p.impl"]
    assert "stablehlo.multiply" not in functions["main"]  # not emitted twice
    assert "stablehlo.add" in functions["main"]  # the op before the pattern stays outside


def test_multiple_inputs_and_outputs_are_operands_and_results_by_position():
    text = _lazy_stablehlo(two_in_two_out, torch.randn(5), torch.randn(5))
    (line,) = [ln for ln in text.splitlines() if "stablehlo.composite" in ln]
    assert re.search(r'%\d+:2 = stablehlo.composite "test.p" %arg\d+, %arg\d+ ', line), line
    impl = _functions(text)["test.p.impl"]
    assert "stablehlo.add" in impl and "stablehlo.multiply" in impl


def test_attributes_are_typed_as_pytorch_xla_types_them():
    def f(x, y):
        b = StableHLOCompositeBuilder("test.attrs", {
            "int_attr": 1, "float_attr": 2.3, "bool_attr": True, "str_attr": "helloworld",
            "int_arr": [1, 2, 3], "float_arr": [1.0, 1.5], "bool_arr": [True, False]})
        x, y = b.mark_inputs(x, y)
        return b.mark_outputs(x + y)

    text = _lazy_stablehlo(f, torch.randn(2), torch.randn(2))
    for expected in ("int_attr = 1 : i64", "float_attr = 2.300000e+00 : f32",
                     "bool_attr = true", 'str_attr = "helloworld"',
                     "int_arr = dense<[1, 2, 3]> : tensor<3xi64>",
                     "float_arr = dense<[1.000000e+00, 1.500000e+00]> : tensor<2xf32>",
                     "bool_arr = dense<[true, false]> : tensor<2xi1>"):
        assert text.count(expected) == 1, expected


def test_regions_of_one_name_are_named_impl_last_first():
    def f(x):
        outs = []
        for i, scale in enumerate((1, 2, 3)):
            y = mark(x, "test.scale", 0, str(i), True) * scale
            outs.append(mark(y, "test.scale", 0, str(i), False,
                             xla_marker.serialize_composite_attr({"scale": scale})))
        return tuple(outs)

    text = _lazy_stablehlo(f, torch.randn(3))
    assert text.count('stablehlo.composite "test.scale"') == 3
    calls = re.findall(r"scale = (\d) : i64\}, decomposition = @([\w.]+)\}", text)
    assert calls == [("1", "test.scale.impl_1"), ("2", "test.scale.impl_0"),
                     ("3", "test.scale.impl")]


def test_a_nested_pattern_is_a_composite_inside_the_outer_decomposition():
    text = _lazy_stablehlo(nested, torch.randn(4))
    functions = _functions(text)
    assert 'stablehlo.composite "test.outer"' in functions["main"]
    assert 'stablehlo.composite "test.inner"' not in functions["main"]
    assert 'stablehlo.composite "test.inner"' in functions["test.outer.impl"]
    assert "stablehlo.exponential" in functions["test.inner.impl"]
    assert "stablehlo.exponential" not in functions["test.outer.impl"]
    assert "stablehlo.sine" in functions["test.outer.impl"]


def test_a_tangent_output_nests_the_inner_pattern_and_keeps_its_values():
    text = _lazy_stablehlo(tangent, torch.randn(4))
    functions = _functions(text)
    assert 'stablehlo.composite "test.inner"' in functions["test.outer.impl"]
    assert "stablehlo.cosine" in functions["test.inner.impl"]
    _check_against_cpu(tangent, torch.randn(4))


def test_an_op_read_outside_its_pattern_is_computed_there_too():
    text = _lazy_stablehlo(escaping, torch.randn(4))
    functions = _functions(text)
    assert "stablehlo.tanh" in functions["test.p.impl"]
    assert "stablehlo.tanh" in functions["main"]  # the unmarked read outside
    _check_against_cpu(escaping, torch.randn(4))


def test_an_unmarked_read_of_a_marked_value_stays_outside():
    def f(x):
        m = mark(x, "test.p", 0, "0", True)
        return mark(m.exp(), "test.p", 0, "0", False) + m

    _check_against_cpu(f, torch.randn(4))
    assert _lazy_stablehlo(f, torch.randn(4)).count("stablehlo.composite") == 1


# --- the numbers: compiled programs with composites ------------------------------------


@pytest.mark.parametrize("fn, arity", [(basic, 1), (two_in_two_out, 2), (nested, 1),
                                       (tangent, 1), (escaping, 1)],
                         ids=["basic", "two_in_two_out", "nested", "tangent", "escaping"])
def test_marked_programs_compute_what_the_cpu_computes(fn, arity):
    _check_against_cpu(fn, *[torch.randn(3, 4) for _ in range(arity)])


def test_sdpa_patterns_compute_what_the_cpu_computes():
    def f(x):
        b = StableHLOCompositeBuilder("test.sdpa", {"scale": 0.25})
        q, k, v = b.mark_inputs(*x.split(4, dim=-2))
        return b.mark_outputs(F.scaled_dot_product_attention(q, k, v, scale=0.25))

    _check_against_cpu(f, torch.randn(2, 3, 12, 8))


def test_gradients_pass_through_marks():
    lin = torch.nn.Linear(4, 4)
    x = torch.randn(3, 4)

    def loss_and_grads(x, module):
        x = x.clone().requires_grad_()
        b = StableHLOCompositeBuilder("test.gelu")
        y = b.mark_outputs(F.gelu(module(b.mark_inputs(x))))
        y.sum().backward()
        return x.grad, module.weight.grad

    want = loss_and_grads(x, lin)
    device_lin = torch.nn.Linear(4, 4).to(torch_xla.device())
    device_lin.load_state_dict(lin.state_dict())
    got = loss_and_grads(x.to(torch_xla.device()), device_lin)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.cpu(), w, **TOLERANCE)


def test_a_fresh_pattern_id_each_step_does_not_compile_again():
    def step(x):
        b = StableHLOCompositeBuilder("test.step")  # a new id, as a forward makes it
        return b.mark_outputs(b.mark_inputs(x).exp())

    x = _device(torch.randn(4))[0]
    step(x).cpu()
    compiled = met.metric_data("CompileTime")[0]
    step(x).cpu()
    assert met.metric_data("CompileTime")[0] == compiled


def test_marks_in_eager_mode_are_identities():
    x = torch.randn(4)
    with eager.eager_mode_context(True):
        got = basic(_device(x)[0]).cpu()
    torch.testing.assert_close(got, basic(x), **TOLERANCE)


def test_a_mark_on_a_cpu_tensor_is_a_copy():
    x = torch.randn(3)
    y = mark(x, "test.p", 0, "0", True)
    assert torch.equal(y, x) and y.data_ptr() != x.data_ptr()


# --- the torch.export path ---------------------------------------------------------------


class Sdpa(torch.nn.Module):
    def forward(self, x, y):
        outs = []
        for t, scale in ((x, 0.25), (y, 2)):
            b = StableHLOCompositeBuilder("test.sdpa", {"scale": scale})
            q, k, v = b.mark_inputs(*t.split(4, dim=-2))
            outs.append(b.mark_outputs(F.scaled_dot_product_attention(q, k, v,
                                                                       scale=scale)))
        return tuple(outs)


def test_an_exported_program_has_the_composites_and_runs_as_the_model():
    model, inputs = Sdpa(), (torch.randn(2, 2, 12, 8), torch.randn(2, 2, 12, 8))
    shlo = exported_program_to_stablehlo(torch.export.export(model, inputs))
    text = shlo.get_stablehlo_text()
    assert text.count('stablehlo.composite "test.sdpa"') == 2
    assert ("{composite_attributes = {scale = 2.500000e-01 : f32}, "
            "decomposition = @test.sdpa.impl_0}") in text
    assert "{composite_attributes = {scale = 2 : i64}, decomposition = @test.sdpa.impl}" \
        in text
    assert "stablehlo.dot_general" not in _functions(text)["main"]
    for g, w in zip(shlo(*_device(*inputs)), model(*inputs), strict=True):
        torch.testing.assert_close(g.cpu(), w, **TOLERANCE)


def test_an_exported_nested_pattern_is_nested():
    shlo = exported_program_to_stablehlo(
        torch.export.export(wrap_func_as_nn_module(nested), (torch.randn(4),)))
    functions = _functions(shlo.get_stablehlo_text())
    assert 'stablehlo.composite "test.inner"' in functions["test.outer.impl"]


# --- malformed patterns ---------------------------------------------------------------


def _outputs_only(x):
    return mark(x.exp(), "test.lonely", 0, "0", False)


def test_outputs_without_inputs_are_an_error_when_shown_or_exported():
    with pytest.raises(CompositeError, match=r"'test.lonely'.*none of its\s+inputs"):
        _lazy_stablehlo(_outputs_only, torch.randn(3))
    with pytest.raises(CompositeError, match="'test.lonely'"):
        exported_program_to_stablehlo(torch.export.export(
            wrap_func_as_nn_module(_outputs_only), (torch.randn(3),)))


def test_outputs_without_inputs_run_as_identities():
    _check_against_cpu(_outputs_only, torch.randn(3))  # a sync may split a pattern


def _refused_when_shown_but_runs(f, match: str, *inputs: torch.Tensor) -> None:
    """Malformed marks: an error where the program is shown, identities where it runs."""
    with pytest.raises(CompositeError, match=match):
        _lazy_stablehlo(f, *inputs)
    _check_against_cpu(f, *inputs)


def test_an_input_that_reaches_no_output_is_an_error():
    def f(x, y):
        x = mark(x, "test.p", 0, "0", True)
        dangling = mark(y, "test.p", 1, "0", True)  # in the graph: the program returns it
        return mark(x * 2, "test.p", 0, "0", False), dangling

    _refused_when_shown_but_runs(f, r"'test.p'.*positions \[1\] do not reach",
                                 torch.randn(3), torch.randn(3))


def test_patterns_that_overlap_without_nesting_are_an_error():
    def f(x):
        x = mark(x, "test.a", 0, "0", True)
        x = mark(x + 1, "test.b", 0, "0", True)
        c = x * 2
        return mark(c, "test.a", 0, "0", False), mark(c + 3, "test.b", 0, "0", False)

    _refused_when_shown_but_runs(f, "'test.(a|b)'.*overlap", torch.randn(3))


def test_an_input_computed_from_an_output_of_its_pattern_is_an_error():
    def f(x):
        x = mark(x, "test.p", 0, "0", True)
        first = mark(x + 1, "test.p", 0, "0", False)
        late = mark(first * 2, "test.p", 1, "0", True)
        return first, mark(late - 1, "test.p", 1, "0", False)

    _refused_when_shown_but_runs(f, "'test.p'.*own outputs", torch.randn(3))


def test_two_marks_at_one_position_are_an_error():
    def f(x):
        a = mark(x, "test.p", 0, "0", True)
        b = mark(x * 2, "test.p", 0, "0", True)
        return mark(a + b, "test.p", 0, "0", False)

    with pytest.raises(CompositeError, match="two input marks at position 0"):
        _lazy_stablehlo(f, torch.randn(3))


def test_outputs_with_different_attribute_values_are_an_error():
    def f(x):
        x = mark(x, "test.p", 0, "0", True)
        return (mark(x + 1, "test.p", 0, "0", False, (("k", 1),)),
                mark(x + 2, "test.p", 1, "0", False, (("k", 2),)))

    with pytest.raises(CompositeError, match="attribute 'k' two values"):
        _lazy_stablehlo(f, torch.randn(3))


@pytest.mark.parametrize("attr", [{"k": None}, {"k": [1, "a"]}, {"k": []}, {"k": [[1]]},
                                  {1: 2}, [("k", 1)]],
                         ids=["none", "mixed", "empty", "nested", "int-key", "not-dict"])
def test_attributes_a_composite_cannot_carry_are_refused(attr):
    with pytest.raises(ValueError, match="composite attribute"):
        xla_marker.serialize_composite_attr(attr)


def test_attribute_kinds():
    assert [attribute_kind(v) for v in (True, 3, 2.5, "s", [1, 2], (True,), [1.0])] == \
        [bool, int, float, str, list, list, list]
    assert [attribute_kind(v) for v in (None, [], [1, 2.0], ["a"], {"a": 1})] == \
        [None] * 5


def test_has_tf_package_answers_without_importing():
    assert isinstance(has_tf_package(), bool)


def test_boundary_metadata_serializes_as_json():
    meta = xla_marker.BoundaryMetadata("test.p", 1, "7", False, {"k": 2})
    assert json.loads(json.dumps(meta, cls=xla_marker.BoundaryMetadataSerializer)) == {
        "name": "test.p", "pos": 1, "id": "7", "is_input": False, "attr": {"k": 2}}
    with pytest.raises(TypeError):
        json.dumps(object(), cls=xla_marker.BoundaryMetadataSerializer)
