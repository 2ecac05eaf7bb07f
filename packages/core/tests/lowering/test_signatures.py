"""Every lowering accepts its overload's arguments the way the engine passes them.

The engine calls `fn(*args, **kwargs)` as `__torch_dispatch__` receives them: positional
schema arguments positionally, keyword-only ones by name, and arguments left at their
default are omitted. So each function must take the schema's positional arguments in
order, take its keyword-only arguments by name, and default whatever the schema defaults.
"""

import inspect

import pytest

import torch_xla.lowering as lowering
from torch_xla.lowering.registry import is_out_variant, registered


def _problems(op, entry) -> list[str]:
    sig = inspect.signature(entry.fn)
    params = list(sig.parameters.values())
    var_positional = any(p.kind is p.VAR_POSITIONAL for p in params)
    var_keyword = any(p.kind is p.VAR_KEYWORD for p in params)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    by_name = {p.name: p for p in params}
    problems = []
    schema_positional = [a for a in op._schema.arguments if not a.kwarg_only]
    if len(schema_positional) > len(positional) and not var_positional:
        problems.append(f"takes {len(positional)} positional args, schema has "
                        f"{len(schema_positional)}")
    for arg, param in zip(schema_positional, positional, strict=False):
        if arg.has_default_value() and param.default is param.empty:
            problems.append(f"positional {arg.name!r} has a schema default but no default")
    for arg in op._schema.arguments:
        if not arg.kwarg_only:
            continue
        param = by_name.get(arg.name)
        if param is None:
            if not var_keyword:
                problems.append(f"keyword-only {arg.name!r} is not accepted")
        elif arg.has_default_value() and param.default is param.empty:
            problems.append(f"keyword-only {arg.name!r} has a schema default but no default")
    extra = positional[len(schema_positional):]
    for param in extra:
        if param.default is param.empty:
            problems.append(f"extra positional {param.name!r} without default")
    if entry.needs_rng and "rng" not in by_name and not var_keyword:
        problems.append("needs_rng but no rng keyword")
    return problems


ENTRIES = [(op, entry) for op, entry in registered()]


@pytest.mark.parametrize("op,entry", ENTRIES, ids=[str(op) for op, _ in ENTRIES])
def test_signature_matches_schema(op, entry):
    problems = _problems(op, entry)
    assert not problems, f"{op} lowered by {entry}: " + "; ".join(problems)


def test_package_exports():
    assert not [name for name in lowering.__all__ if not hasattr(lowering, name)]
    core = lowering.core_aten_ops()
    entry = lowering.lookup(core[0])
    assert isinstance(entry, lowering.Lowering) and core[0] in entry.overloads, (core[0], entry)
    assert dict(lowering.registered())[core[0]] is entry
    # Core ATen as the engine sees it: functionalization never sends out= variants.
    assert not [str(op) for op in core if is_out_variant(op)]
