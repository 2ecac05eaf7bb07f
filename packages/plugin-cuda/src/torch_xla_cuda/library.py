"""Where the CUDA PJRT C API library is."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any

from torch_xla.plugins import PluginError, env_file

LIBRARY_ENV = "GPU_LIBRARY_PATH"  # PyTorch/XLA's name for the override
LIBRARY_FILE = "xla_cuda_plugin.so"

# jax's PJRT packages, newest CUDA first: (module that ships the library, our pip extra).
PJRT_PACKAGES = (
    ("jax_plugins.xla_cuda13", "cuda13"),
    ("jax_plugins.xla_cuda12", "cuda12"),
)


def find_library() -> str:
    """`GPU_LIBRARY_PATH` if set, else the library of an installed jax-cuda1x-pjrt."""
    override = env_file(
        LIBRARY_ENV,
        expected=LIBRARY_FILE,
        fallback="the installed jax-cuda12-pjrt/jax-cuda13-pjrt",
    )
    if override:
        return override
    for module, extra in PJRT_PACKAGES:
        directory = package_directory(module)
        if directory is None:
            continue
        path = os.path.join(directory, LIBRARY_FILE)
        if not os.path.isfile(path):
            raise PluginError(
                f"{module} is installed at {directory} but has no {LIBRARY_FILE}. "
                f"Reinstall it, e.g. `pip install --force-reinstall 'torch-xla-cuda[{extra}]'`."
            )
        return path
    raise PluginError(
        "The CUDA plugin found no PJRT library: neither jax-cuda12-pjrt nor jax-cuda13-pjrt "
        "is installed. Run `pip install 'torch-xla-cuda[cuda12]'` (CUDA 12 driver) or "
        f"`pip install 'torch-xla-cuda[cuda13]'` (CUDA 13 driver), or set {LIBRARY_ENV} "
        f"to the path of {LIBRARY_FILE}."
    )


def package_directory(module: str) -> str | None:
    """The directory of an installed package, found without importing it (finding the
    library must not import jax, which an imported package would)."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:  # the jax_plugins namespace itself is absent
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


# The `initialize()` of each jax PJRT package imported by keep_jax_from_registering_it,
# newest CUDA first; register() runs one of them, jax's discovery none.
_jax_initializers: dict[str, Callable[[], None]] = {}


def keep_jax_from_registering_it() -> None:
    """Stop jax's own plugin discovery from registering "cuda" a second time.

    At its first backend query jax imports every installed `jax_plugins.*` package and
    calls its `initialize()`, which registers the same library under "cuda" again: an
    ALREADY_EXISTS error logged as a "Jax plugin configuration error" (or, where its CUDA
    version check runs first, a failed check) in every CUDA process. So each installed
    package is imported here and its `initialize()` swapped for one that does nothing;
    jax finds the package already imported. The real one is kept for `register`, which
    the core calls to register the library once, with our client options.
    Call this before the client exists; other platforms never call it.
    """
    for module, _ in PJRT_PACKAGES:
        if module in _jax_initializers or package_directory(module) is None:
            continue
        package = importlib.import_module(module)
        initialize = package.initialize
        if initialize is not _registered_by_torch_xla:
            _jax_initializers[module] = initialize
            package.initialize = _registered_by_torch_xla


def _registered_by_torch_xla() -> None:
    """jax's plugin hook: nothing to do, torch_xla_cuda registered the library as "cuda"."""


def register(platform: str, path: str, options: dict[str, Any]) -> None:
    """Register the library at `path` with jax as `platform`, with our client `options`,
    through the installed jax package's own `initialize()`.

    That function does more than register the library: it loads NVIDIA's libraries from
    the `nvidia-*` wheels, checks their versions, and, when `jax-cuda1x-plugin` is
    installed, registers that package's custom-call handlers (cuSOLVER, cuDNN, ... :
    `linalg.det`, `cholesky`, `svd` need them), FFI types and Triton compiler with the
    library's C API. It is run with its one `register_plugin` call redirected to our
    library and options, so all of that happens for the library registered once. With
    no jax package installed (`GPU_LIBRARY_PATH` alone), the library is registered plainly.
    """
    from jax._src import xla_bridge  # jax loads only when the client is being created

    plain = xla_bridge.register_plugin
    registered: list[Any] = []

    def register_ours(name: str, *args: Any, priority: int = 400, **kwargs: Any) -> Any:
        c_api = plain(platform, priority=priority, library_path=path, options=options)
        registered.append(c_api)
        return c_api

    initialize = _initializer_for(path)
    if initialize is not None:
        xla_bridge.register_plugin = register_ours
        try:
            initialize()
        except Exception as error:  # noqa: BLE001 - reported with what it means
            raise PluginError(
                f"jax's CUDA package failed to set up the library {path}: "
                f"{type(error).__name__}: {error}. Install a matching set with "
                "`pip install 'torch-xla-cuda[cuda13]'` (or [cuda12]), or set "
                "JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 to skip its CUDA version check."
            ) from error
        finally:
            xla_bridge.register_plugin = plain
    if not registered:
        plain(platform, library_path=path, options=options)


def _initializer_for(path: str) -> Callable[[], None] | None:
    """The kept `initialize()` of the package that ships `path`, else the newest one."""
    for module, initialize in _jax_initializers.items():
        directory = package_directory(module)
        if directory is not None and os.path.dirname(os.path.abspath(path)) == directory:
            return initialize
    return next(iter(_jax_initializers.values()), None)
