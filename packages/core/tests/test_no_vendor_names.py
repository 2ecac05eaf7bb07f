"""The core names no vendor: device types come from plugins.

Vendor names may appear only in docstrings, as examples of plugin names.
"""

import ast
import io
import pathlib
import re
import tokenize

SOURCE = pathlib.Path(__file__).parents[1] / "src"
VENDOR = re.compile(
    r"(?<![a-z])(tpu|libtpu|cuda|gpu|nvidia|neuron|libneuronxla|xpu|rocm|amd|intel|"
    r"habana|gaudi|trainium|inferentia)(?![a-z])"
)


def docstring_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    lines.add(body[0].lineno)
    return lines


def vendor_mentions(path: pathlib.Path) -> list[str]:
    text = path.read_text()
    docstrings = docstring_lines(ast.parse(text))
    found = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.STRING and token.start[0] in docstrings:
            continue
        if token.type in (tokenize.NAME, tokenize.STRING, tokenize.COMMENT):
            if VENDOR.search(token.string.lower()):
                found.append(f"{path}:{token.start[0]}: {token.string.strip()[:80]}")
    return found


def test_the_checker_catches_a_hard_coded_vendor(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Plugins such as TPU are examples here."""\n'
        "if device_type == 'TPU':  # special case\n    use_libtpu = True\n"
    )
    assert len(vendor_mentions(sample)) == 2  # the string and the name; not the docstring


def test_core_source_names_no_vendor():
    files = sorted(SOURCE.rglob("*.py"))
    assert files, f"no sources under {SOURCE}"
    mentions = [m for f in files for m in vendor_mentions(f)]
    assert mentions == [], "vendor names hard-coded in the core:\n" + "\n".join(mentions)
