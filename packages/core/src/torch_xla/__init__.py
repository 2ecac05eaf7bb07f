"""torch-xla: PyTorch on XLA devices through PJRT plugins.

Importing this package checks the torch version and makes the `xla` device
known to torch. Installed device plugins are discovered on the first question
asked of the plugin registry (unless XLA_REGISTER_INSTALLED_PLUGINS=0);
nothing starts a device until a program asks for one.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import uuid
import weakref
from collections.abc import Callable
from typing import Any

import torch

from torch_xla.version import MIN_TORCH_VERSION, __version__


def _torch_version(text: str) -> tuple[int, int]:
    major, minor = text.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def check_torch_version(text: str = torch.__version__) -> None:
    if _torch_version(text) < MIN_TORCH_VERSION:
        wanted = ".".join(map(str, MIN_TORCH_VERSION))
        raise ImportError(
            f"torch_xla needs torch>={wanted} for its xla device, found torch {text}. "
            f"Upgrade with `pip install 'torch>={wanted}'`."
        )


check_torch_version()

from torch_xla import _XLAC, _metrics  # noqa: E402 - torch_xla._XLAC, as PyTorch/XLA has it
from torch_xla import backend as _backend  # noqa: E402

_backend.register()  # torch.device("xla", n) works from here on; no device is started


# Functions PyTorch/XLA binds in `torch_xla` itself, from the module that defines them.
_FUNCTIONS_OF = {"save_as_stablehlo": "torch_xla.stablehlo",
                 "save_torch_model_as_stablehlo": "torch_xla.stablehlo"}
# Modules PyTorch/XLA's `torch_xla` carries under short names (`torch_xla.xm.fork_rng()`).
_MODULE_ALIASES = {"xm": "torch_xla.core.xla_model"}


def __getattr__(name: str) -> Any:
    """Submodules (`torch_xla.runtime`, `torch_xla.core`, ...) and the functions of
    `_FUNCTIONS_OF` are reachable as attributes after a bare `import torch_xla`, imported
    on first access: most of them import jax (about a second), which `import torch_xla`
    must not."""
    if name in _FUNCTIONS_OF:
        return getattr(importlib.import_module(_FUNCTIONS_OF[name]), name)
    if name in _MODULE_ALIASES:
        return importlib.import_module(_MODULE_ALIASES[name])
    if not name.startswith("__") and importlib.util.find_spec(f"torch_xla.{name}") is not None:
        return importlib.import_module(f"torch_xla.{name}")
    raise AttributeError(f"module 'torch_xla' has no attribute {name!r}")


def device(index: int | None = None) -> torch.device:
    """The XLA device `xla:index` of this process (xla:0 by default).

    Raises IndexError when the process has no such device.
    """
    from torch_xla.core import xla_model

    return xla_model.xla_device(index)


def devices() -> list[torch.device]:
    """Every XLA device this process drives."""
    from torch_xla.core import xla_model

    return [torch.device(d) for d in xla_model.get_xla_supported_devices()]


def real_devices() -> list[str]:
    """Runtime names of this process's devices, e.g. `['CPU:0', 'CPU:1']`."""
    return _XLAC._xla_real_devices()


def device_count() -> int:
    """Number of devices this process drives."""
    return len(real_devices())


def sync(wait: bool = False, reset_scope: bool = True) -> None:
    """Run every pending XLA computation, then the step closures (`xm.mark_step()`)."""
    from torch_xla.core import xla_model

    xla_model.mark_step(wait=wait, reset_scope=reset_scope)


def step() -> contextlib.AbstractContextManager[None]:
    """A context manager that syncs on entry and on exit, even when the block raises."""
    return compile()


def manual_seed(seed: int, device: torch.device | str | None = None) -> None:
    """Seed the XLA random number generator (one state per process, for every device)."""
    from torch_xla.core import xla_model

    xla_model.set_rng_state(seed, device)


def compile(f: Callable | None = None, full_graph: bool = False, name: str | None = None,
            num_different_graphs_allowed: int | None = None, *,
            max_different_graphs: int | None = None,
            allowed_traces: int | None = None) -> Any:
    """Trace `f` lazily and run it as compiled graphs: a sync before and after each call.

    Without `f`, a context manager doing the same around its block. With
    `full_graph=True` the traced code must become one graph: if it made the device
    run anything before the final sync (`.item()`, `.cpu()`, `print` of a pending
    tensor, a CPU-fallback op), RuntimeError names how many graphs ran.
    `num_different_graphs_allowed=n`: the calls of `f` may trace at most `n` different
    graphs (another input shape, another branch taken); a call that would trace one
    more raises RuntimeError at the first op that differs, saying what the earlier
    graphs did there (`lazy/dynamic_shape_detector.py`). `max_different_graphs` and
    `allowed_traces` are its names in earlier PyTorch/XLA releases.
    """
    limits = {k: v for k, v in (("num_different_graphs_allowed", num_different_graphs_allowed),
                                ("max_different_graphs", max_different_graphs),
                                ("allowed_traces", allowed_traces)) if v is not None}
    if len(limits) > 1:
        raise TypeError(f"torch_xla.compile: {' and '.join(limits)} are one setting under "
                        "several names; pass num_different_graphs_allowed only.")
    limit = next(iter(limits.values()), None)
    if name is None and f is not None:
        name = getattr(f, "__name__", None) or str(f)
    session = _detector_session(f, name) if limit is not None else None
    scope = _CompiledScope(name or "the compiled block", full_graph, limit, session)
    return scope if f is None else scope(f)


# The functions given a graph limit, by session name: a session whose function is gone
# is started afresh (another function may get its id).
_LIMITED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _detector_session(f: Callable | None, name: str | None) -> str:
    """The dynamic shape detector's session of compiled function `f`, as PyTorch/XLA
    names it: the function's name and id (a fresh one for each `with` block)."""
    if f is None:
        return f"block_{uuid.uuid4()}"
    session = f"{name}_{id(f)}"
    if _LIMITED.get(session) is not f:
        _XLAC._dynamic_shape_detector_remove_session(session)
        try:
            _LIMITED[session] = f
        except TypeError:  # not weakly referable: its session lives as long as the process
            pass
    return session


class _CompiledScope(contextlib.ContextDecorator):
    """`torch_xla.compile`'s region: sync, trace, sync; counts graphs run in between.
    Inside it eager mode is off, so the block is traced lazily into one graph; with a
    graph `limit`, the block's trace is one of `session`'s (the dynamic shape detector)."""

    def __init__(self, name: str, full_graph: bool, limit: int | None = None,
                 session: str | None = None) -> None:
        self.name, self.full_graph = name, full_graph
        self.limit, self.session = limit, session
        self._starts: list[int] = []  # one per active call: a compiled function may recurse
        self._eager: list[bool] = []  # the eager mode each active call replaced

    def __enter__(self) -> None:
        if self.limit is not None:  # first: a bad limit raises before anything changed
            _XLAC._dynamic_shape_detector_set_max_num_different_graphs_allowed(self.limit)
        self._eager.append(_XLAC._get_use_eager_mode())
        _XLAC._set_use_eager_mode(False)
        sync()
        self._starts.append(_graphs_run())
        if self.limit is not None:
            _XLAC._dynamic_shape_detector_start_session(self.session)

    def __exit__(self, kind, error, trace) -> None:
        ran = _graphs_run() - self._starts.pop()
        try:
            if self.limit is not None:
                _XLAC._dynamic_shape_detector_end_session()
        finally:
            try:
                sync()
            finally:
                _XLAC._set_use_eager_mode(self._eager.pop())
        if self.full_graph and error is None and ran:
            raise RuntimeError(
                "Unexpected execution happens inside the compiled function, exiting: "
                f"torch_xla.compile(full_graph=True): tracing {self.name} needed {ran + 1} "
                f"graphs, not one: {ran} ran before its end because the code read a pending "
                "value on the host (.item(), .cpu(), print, a Python branch on a tensor) or "
                "used an op that falls back to the CPU. Remove those, or pass full_graph=False."
            )


def _graphs_run() -> int:
    """Graphs executed so far: every execution is one cache miss or one hit."""
    return sum(_metrics.counters()[n].value for n in ("UncachedCompile", "CachedCompile")
               if n in _metrics.counters())


def launch(fn: Callable, args: tuple = (), start_method: str = "spawn",
           debug_single_process: bool = False) -> Any:
    """Run `fn(index, *args)` on every device: in one process per device (`xmp.spawn`),
    or, under torchrun, directly in this process with index LOCAL_RANK."""
    import torch.distributed as dist

    if dist.is_torchelastic_launched():
        return fn(int(os.environ.get("LOCAL_RANK", "0")), *args)
    from torch_xla.distributed import xla_multiprocessing as xmp

    nprocs = 1 if debug_single_process else None
    return xmp.spawn(fn, args=args, nprocs=nprocs, start_method=start_method)


__all__ = [
    "__version__", "compile", "device", "device_count", "devices", "launch", "manual_seed",
    "real_devices", "step", "sync",
]
