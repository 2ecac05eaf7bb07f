"""Measurement aid for GPU images whose torch is older than the core's floor (2.13).

`bench/cuda_session.sh` installs this as `sitecustomize` beside the wheels on such an
image only. An ATen op or overload that torch_xla names but this torch lacks becomes an
inert placeholder, so the lowering modules import (the op can never be dispatched on this
torch anyway) and the rest is measured. Each one is printed once. Not part of any package.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

import torch
import torch._ops

ABSENT: set[str] = set()


class Absent:
    """Stands in for an op or overload; registering it lowers nothing."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return self

    def overloads(self) -> list[str]:
        return []

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"aten.{self.name} does not exist in torch {torch.__version__}")

    def __repr__(self) -> str:
        return f"<absent aten.{self.name}>"


def _from_torch_xla() -> bool:
    frame = sys._getframe(2)
    return frame.f_globals.get("__name__", "").startswith("torch_xla")


def _absent(name: str) -> Absent:
    if name not in ABSENT:
        ABSENT.add(name)
        print(f"older-torch shim: aten.{name} is absent in torch {torch.__version__}",
              file=sys.stderr)
    return Absent(name)


_namespace_getattr = torch._ops._OpNamespace.__getattr__
_packet_getattr = torch._ops.OpOverloadPacket.__getattr__


def namespace_getattr(self, name):
    try:
        return _namespace_getattr(self, name)
    except AttributeError:
        if self.name != "aten" or name.startswith("__") or not _from_torch_xla():
            raise
        return _absent(name)


def packet_getattr(self, name):
    try:
        return _packet_getattr(self, name)
    except AttributeError:
        if name.startswith("__") or not _from_torch_xla():
            raise
        return _absent(f"{self._qualified_op_name.split('::')[-1]}.{name}")


torch._ops._OpNamespace.__getattr__ = namespace_getattr
torch._ops.OpOverloadPacket.__getattr__ = packet_getattr



def _patch(registry) -> None:
    _expand, _register = registry.expand, registry.register

    def expand(op):
        return [] if isinstance(op, Absent) else _expand(op)

    def register(*ops, **kwargs):
        real = [op for op in ops if not isinstance(op, Absent)]
        if ops and not real:
            return lambda fn: fn
        return _register(*real, **kwargs)

    registry.expand, registry.register = expand, register


class _PatchRegistry(importlib.abc.MetaPathFinder):
    """Wraps torch_xla.lowering.registry's register() right after that module runs,
    before the op modules import it (importing it here would import them too)."""

    NAME = "torch_xla.lowering.registry"

    def find_spec(self, name, path, target=None):
        if name != self.NAME:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PatchRegistry())
