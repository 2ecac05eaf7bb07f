import pytest

CUDA_ENV = (
    "GPU_LIBRARY_PATH",
    "GPU_NUM_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "PJRT_ALLOCATOR_FRACTION",
    "PJRT_ALLOCATOR_PREALLOCATE",
    "PJRT_ALLOCATOR_CUDA_ASYNC",
    "WORLD_SIZE",
    "PJRT_LOCAL_PROCESS_COUNT",
    "PJRT_LOCAL_PROCESS_RANK",
    "PJRT_DEVICE",
)


@pytest.fixture(autouse=True)
def clean_cuda_env(monkeypatch):
    """Every test starts without CUDA variables; whatever it sets is undone."""
    for name in CUDA_ENV:
        monkeypatch.delenv(name, raising=False)
