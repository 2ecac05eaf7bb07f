"""Where libneuronxla's PJRT C API library is."""

from __future__ import annotations

import os

from torch_xla.plugins import PluginError

LIBRARY_ENV = "NEURON_LIBRARY_PATH"
INSTALL_HINT = (
    "Install the Neuron SDK's libneuronxla (`pip install libneuronxla "
    "--extra-index-url https://pip.repos.neuron.amazonaws.com`)"
)


def find_library() -> str:
    """`NEURON_LIBRARY_PATH` if set, else the path libneuronxla reports."""
    override = os.environ.get(LIBRARY_ENV)
    if override:
        if not os.path.isfile(override):
            raise PluginError(
                f"{LIBRARY_ENV}={override!r} is not a file. Point it at libneuronpjrt.so, "
                "or unset it to use the installed libneuronxla."
            )
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
