"""Where libneuronxla's PJRT C API library is."""

from __future__ import annotations

import os

from torch_xla.plugins import PluginError, env_file

LIBRARY_ENV = "NEURON_LIBRARY_PATH"
INSTALL_HINT = (
    "Install the Neuron SDK's libneuronxla (`pip install libneuronxla "
    "--extra-index-url https://pip.repos.neuron.amazonaws.com`)"
)


def find_library() -> str:
    """`NEURON_LIBRARY_PATH` if set, else the path libneuronxla reports."""
    override = env_file(
        LIBRARY_ENV, expected="libneuronpjrt.so", fallback="the installed libneuronxla"
    )
    if override:
        return override
    try:
        from libneuronxla.libneuronpjrt_path import libneuronpjrt_path
    except ImportError as error:
        raise PluginError(
            f"The Neuron plugin needs libneuronxla, which is not installed ({error}). "
            f"{INSTALL_HINT}, or set {LIBRARY_ENV} to libneuronpjrt.so."
        ) from error
    path = os.fspath(libneuronpjrt_path())
    if not os.path.isfile(path):
        raise PluginError(
            f"libneuronxla reports its PJRT library at {path!r}, which does not exist. "
            f"{INSTALL_HINT} again, or set {LIBRARY_ENV}."
        )
    return path
