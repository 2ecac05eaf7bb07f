import os
import sys
import textwrap

import pytest

NEURON_ENV = (
    "NEURON_LIBRARY_PATH",
    "NEURONCORE_NUM_DEVICES",
    "NEURON_RT_VISIBLE_CORES",
    "NEURON_PJRT_PROCESS_INDEX",
    "NEURON_PJRT_PROCESSES_NUM_DEVICES",
    "NEURON_PJRT_WORLD_SIZE",
    "NEURON_RT_ROOT_COMM_ID",
    "MASTER_ADDR",
    "RANK",
    "WORLD_SIZE",
    "XLA_DENSE_GATHER_FACTOR",
    "PJRT_DEVICE",
)


@pytest.fixture(autouse=True)
def clean_neuron_env(monkeypatch):
    """Every test starts without Neuron variables; whatever it sets is undone."""
    for name in NEURON_ENV:
        monkeypatch.delenv(name, raising=False)


def forget_libneuronxla() -> None:
    for name in ("libneuronxla", "libneuronxla.libneuronpjrt_path"):
        sys.modules.pop(name, None)


@pytest.fixture
def libneuronxla(tmp_path, monkeypatch):
    """A stand-in libneuronxla: only `libneuronpjrt_path()`, reporting `library`.

    The real package ships libneuronpjrt.so and cannot be installed here.
    Returns the directory to put on the path of subprocesses too.
    """

    def install(library: str) -> str:
        package = tmp_path / "site" / "libneuronxla"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "libneuronpjrt_path.py").write_text(
            textwrap.dedent(
                f"""
                def libneuronpjrt_path():
                    return {library!r}
                """
            )
        )
        site = os.fspath(tmp_path / "site")
        monkeypatch.syspath_prepend(site)
        forget_libneuronxla()
        return site

    yield install
    forget_libneuronxla()
