"""Helpers of PyTorch/XLA's StableHLO tests (`torch_xla.utils.stablehlo_test_utils`):
whether TensorFlow is installed, a function as a module, and comparing an exported
program with the TensorFlow SavedModel written from it."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree as pytree

__all__ = ["compare_exported_program_and_saved_model_result", "has_tf_package",
           "load_save_model_and_inference", "wrap_func_as_nn_module"]


@functools.lru_cache
def has_tf_package() -> bool:
    """Whether `tensorflow` can be imported (looked up, not imported)."""
    return importlib.util.find_spec("tensorflow") is not None


def wrap_func_as_nn_module(f: Callable) -> torch.nn.Module:
    """`f` as the `forward` of a module in eval mode (what `torch.export` takes)."""

    class M(torch.nn.Module):
        def forward(self, *args: Any) -> Any:
            return f(*args)

    return M().eval()


def _tensorflow() -> Any:
    if not has_tf_package():
        raise ImportError("this needs TensorFlow: pip install tensorflow")
    import tensorflow

    return tensorflow


def load_save_model_and_inference(path: str, args: tuple) -> Any:
    """Run the SavedModel at `path` (its function `f`) on `args` (CPU tensors)."""
    tf = _tensorflow()
    loaded = tf.saved_model.load(path)
    return loaded.f(*pytree.tree_map_only(torch.Tensor, lambda t: tf.constant(t.numpy()),
                                          args))


def compare_exported_program_and_saved_model_result(ep: Any, saved_model_path: str,
                                                    args: tuple, atol: float = 1e-7
                                                    ) -> tuple:
    """Assert that the exported program and the SavedModel agree on `args` (dtypes equal,
    values within `atol`); returns both results as numpy arrays."""
    tf_out = load_save_model_and_inference(saved_model_path, args)
    with torch.no_grad():
        torch_out = ep.module()(*args)
    torch_out = torch_out if isinstance(torch_out, tuple) else (torch_out,)
    assert len(torch_out) == len(tf_out), f"{len(torch_out)} outputs vs {len(tf_out)}"
    for i, (t, f) in enumerate(zip(torch_out, tf_out, strict=True)):
        assert t.numpy().dtype == f.numpy().dtype, f"output {i}: {t.dtype} vs {f.dtype}"
        assert np.allclose(t.numpy(), f.numpy(), atol=atol), f"output {i} differs"
    return tuple(t.numpy() for t in torch_out), tuple(f.numpy() for f in tf_out)
