"""The engine runs with 64-bit types enabled; so do these tests."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The harness compiles thousands of tiny programs: cheap compiles matter more than speed.
os.environ.setdefault(
    "XLA_FLAGS",
    "--xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=0 "
    "--xla_llvm_disable_expensive_passes=true",
)

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
