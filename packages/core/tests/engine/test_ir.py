"""No device needed: importing registers the device without starting a client; IR hashing."""

from __future__ import annotations

import numpy as np
import torch

from torch_xla.lazy import ir

from .helpers import run_python


def test_import_registers_xla_without_starting_a_client():
    out = run_python(
        """
        import torch, torch_xla
        from torch_xla.pjrt.client import started
        d = torch.device("xla", 0)
        name = torch._C._get_privateuse1_backend_name()
        print(d, name, started() is None, torch.xla.is_initialized())
        """
    )
    assert out.strip().splitlines()[-1] == "xla:0 xla True False"


def _data(shape, dtype=torch.float32):
    return ir.Data(np.zeros(shape, np.float32), (shape, dtype), 0)


def _node(op, inputs, statics, aval):
    return ir.Node(op, None, (statics, ()), inputs, (aval,), 0, hash((op, statics, aval)))


def test_equal_structure_hashes_equal_whatever_the_data():
    a, b = _data((2, 3)), _data((2, 3))
    a.array = np.ones((2, 3), np.float32)
    n1 = _node("add", [(a, 0), (a, 0)], (), ((2, 3), torch.float32))
    n2 = _node("add", [(b, 0), (b, 0)], (), ((2, 3), torch.float32))
    assert n1.hash == n2.hash


def test_hash_covers_shapes_dtypes_statics_and_input_order():
    a, c = _data((2, 3)), _data((3, 2))
    base = _node("sum", [(a, 0)], (1,), ((2,), torch.float32))
    assert base.hash != _node("sum", [(a, 0)], (0,), ((3,), torch.float32)).hash
    assert base.hash != _node("sum", [(c, 0)], (1,), ((3,), torch.float32)).hash
    assert _data((2,)).hash != _data((2,), torch.int32).hash
    x, y = _data((2,)), _data((3,))
    xy = _node("f", [(x, 0), (y, 0)], (), ((2,), torch.float32))
    yx = _node("f", [(y, 0), (x, 0)], (), ((2,), torch.float32))
    assert xy.hash != yx.hash
