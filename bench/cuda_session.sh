#!/usr/bin/env bash
# One GPU session: the CUDA plugin's conformance kit and the side-by-side benchmarks on a
# machine with an NVIDIA GPU and a Python that already has torch (CUDA build), jax and
# jax-cuda1x-plugin. Our packages come as wheels built from this checkout:
#
#   python -m build --wheel --no-isolation -o .whl packages/core
#   python -m build --wheel --no-isolation -o .whl packages/plugin-cuda
#   python -m build --wheel --no-isolation -o .whl packages/plugin-cpu  # engine tests' subprocesses
#   pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
#       importlib_metadata==8.7.0 expecttest     # 10.x needs lazy_importer, absent there
#   OUT=/some/folder bash bench/cuda_session.sh     # BENCH_ONLY=1: only the benchmarks
#                                                   # KIT_ONLY=1: only the kit and the
#                                                   # engine's linalg and conv tests
#                                                   # ENGINE_TESTS="files": only these
#                                                   # engine tests (paths under
#                                                   # packages/core), on the GPU
#                                                   # ENGINE_FILES="files": the full
#                                                   # run's last stage runs these
#                                                   # instead of the numerics files
#
# Every stage runs under its own time limit and the script goes on after a failed stage,
# so one run reports all it can; logs and JSON figures land in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cuda-session}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
stage() { echo; echo "=== $* ($(date +%T))"; }

stage "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 - <<'PY'
import platform, torch, jax, jaxlib
print("python", platform.python_version(), "| torch", torch.__version__, "cuda",
      torch.cuda.is_available(), "| jax", jax.__version__, "jaxlib", jaxlib.__version__,
      "| torch._C._acc:", hasattr(torch._C, "_acc"))
PY
nproc

stage "install torch-xla-core and torch-xla-cuda (wheels, no dependencies)"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
# A GPU image whose torch is older than the core's floor (torch 2.13, tested) can still be
# measured: the floor is lowered in this installed copy only, ops that torch lacks become
# inert placeholders (bench/older_torch_shim.py, installed as sitecustomize), and the log
# says so.
python3 - <<'PY'
import re, torch
path = "/tmp/site/torch_xla/version.py"
have = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
text = open(path).read()
floor = tuple(int(v) for v in re.search(r"MIN_TORCH_VERSION = \((\d+), (\d+)\)", text).groups())
if have < floor:
    print(f"NOTE: torch {torch.__version__} is below the core's floor {floor}; "
          "lowered in this installed copy to measure on this image")
    open(path, "w").write(text.replace(f"MIN_TORCH_VERSION = {floor}",
                                       f"MIN_TORCH_VERSION = {have}"))
    import shutil
    shutil.copy("bench/older_torch_shim.py", "/tmp/site/sitecustomize.py")
PY

export PJRT_DEVICE=CUDA
# Eager CUDA PyTorch and the XLA client share the GPU in the benchmarks: no preallocation.
export PJRT_ALLOCATOR_PREALLOCATE=false XLA_PYTHON_CLIENT_PREALLOCATE=false

# Engine tests (each result against eager torch on the host's CPU) with the GPU as the xla
# device. Interrupted, not killed, at the limit: pytest then still prints its summary.
engine_tests() {
    (cd packages/core && timeout -s INT "${ENGINE_LIMIT:-120}" python3 -m pytest -q \
        -p no:cacheprovider -n 6 -rfE --tb=short --junitxml="$OUT/engine.xml" "$@")
}

if [ -n "${ENGINE_TESTS:-}" ]; then
    stage "engine tests with PJRT_DEVICE=CUDA: $ENGINE_TESTS"
    # shellcheck disable=SC2086 - a list of paths
    engine_tests $ENGINE_TESTS
    stage "done"
    exit 0
fi

if [ -z "${KIT_ONLY:-}" ]; then
stage "torch_xla modules that do not import with this image's torch and jax"
timeout 120 python3 - <<'PY'
import importlib, os, pkgutil, subprocess
import jax, torch_xla
failed = []
for info in pkgutil.walk_packages(torch_xla.__path__, "torch_xla."):
    if info.name.endswith("__main__"):  # runs the command line
        continue
    try:
        importlib.import_module(info.name)
    except Exception as e:  # noqa: BLE001 - a report of everything that fails
        failed.append(info.name)
        print(f"  {info.name}: {type(e).__name__}: {e}")
print(f"{len(failed)} modules failed to import")
src = os.path.dirname(jax.__file__)
print(subprocess.run(["grep", "-rln", "def shard_alike", src], capture_output=True,
                     text=True).stdout)
PY
fi
if [ -z "${BENCH_ONLY:-}" ]; then  # BENCH_ONLY=1: only the benchmarks
stage "torch-xla plugins --devices"
timeout 120 python3 -m torch_xla.cli plugins --devices

stage "conformance kit on the GPU"
timeout 240 python3 -m pytest -q -p no:cacheprovider -rs --junitxml="$OUT/conformance.xml" \
    --pyargs torch_xla.testing.conformance

if [ -n "${KIT_ONLY:-}" ]; then
    stage "engine: linear algebra and convolutions with PJRT_DEVICE=CUDA"
    (cd packages/core && timeout -s INT 120 python3 -m pytest -q -p no:cacheprovider -rfE \
        --tb=short tests/engine/test_opinfo.py -k "linalg or conv")
    stage "done"
    exit 0
fi

stage "the main job (examples/train_digits.py) on the GPU"
timeout 150 python3 examples/train_digits.py --checkpoint /tmp/digits_cnn.pt
fi

for bench in mnist_cnn small_gpt; do
    stage "bench/$bench.py: eager CUDA, lazy, dynamo, JAX floor on the GPU"
    timeout 240 python3 "bench/$bench.py" --eager-device cuda --json "$OUT/$bench-cuda.json"
done
stage "bench/compiled_optimizer.py: AdamW lazy or compiled, capturable or not, on the GPU"
timeout 120 python3 bench/compiled_optimizer.py
stage "bench/dynamo_call.py: host time of one cached torch.compile call on the GPU"
timeout 60 python3 bench/dynamo_call.py
stage "bench/donation_memory.py: the device's peak memory of an AdamW step, donating or not"
timeout 90 python3 bench/donation_memory.py --json "$OUT/donation-cuda.json"
stage "bench/host_read_retention.py: host memory that reads and checkpoint saves leave behind"
timeout 120 python3 bench/host_read_retention.py --json "$OUT/host-reads-cuda.json"

if [ -z "${BENCH_ONLY:-}" ]; then
stage "host cost of one recorded op"
timeout 90 python3 bench/record_per_op.py

stage "engine tests with PJRT_DEVICE=CUDA"
# shellcheck disable=SC2086 - a list of paths
engine_tests ${ENGINE_FILES:-tests/engine/test_device.py tests/engine/test_opinfo.py \
    tests/engine/test_training.py tests/engine/test_dtypes.py tests/engine/test_views.py \
    tests/engine/test_rnn.py tests/engine/test_device_autograd.py}
fi
stage "done"
