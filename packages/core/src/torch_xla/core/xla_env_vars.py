"""`torch_xla.core.xla_env_vars` (xenv): names of the environment variables PyTorch/XLA reads.

The constants keep PyTorch/XLA's names and values. Variables that only one vendor's
runtime reads are not here: each plugin package documents its own.
"""

# Which device plugin the process uses, and whether one is chosen automatically
# ("0": never; `torch_xla.runtime.device_type()` is then None until PJRT_DEVICE is set).
PJRT_DEVICE = "PJRT_DEVICE"
PJRT_SELECT_DEFAULT_DEVICE = "PJRT_SELECT_DEFAULT_DEVICE"
CPU_NUM_DEVICES = "CPU_NUM_DEVICES"
PJRT_CPU_ASYNC_CLIENT = "PJRT_CPU_ASYNC_CLIENT"

# Set by `xmp.spawn` in each child: its place among the processes of its host.
PJRT_LOCAL_PROCESS_RANK = "PJRT_LOCAL_PROCESS_RANK"
PJRT_LOCAL_PROCESS_COUNT = "PJRT_LOCAL_PROCESS_COUNT"
PJRT_DIST_SERVICE_ADDR = "PJRT_DIST_SERVICE_ADDR"

# Set by torchrun (torchelastic); `torch_xla.launch` reads LOCAL_RANK under it.
LOCAL_RANK = "LOCAL_RANK"
RANK = "RANK"
WORLD_SIZE = "WORLD_SIZE"
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"

# The XRT runtime's variables, kept so that programs importing the names still load;
# nothing here reads them (XRT is gone upstream too).
MP_DEVICE = "XRT_MULTI_PROCESSING_DEVICE"
LOCAL_WORKER = "XRT_LOCAL_WORKER"
SERVICE_ADDRESS = "XRT_MESH_SERVICE_ADDRESS"
DEVICE_MAP = "XRT_DEVICE_MAP"
WORKERS = "XRT_WORKERS"
LOCAL_ORDINAL = "XRT_SHARD_LOCAL_ORDINAL"
ORDINAL = "XRT_SHARD_ORDINAL"
HOST_WORLD_SIZE = "XRT_HOST_WORLD_SIZE"
HOST_ORDINAL = "XRT_HOST_ORDINAL"
TORCH_DIST_METHOD = "XRT_TORCH_DIST_METHOD"
TORCH_DIST_ROOT = "XRT_TORCH_DIST_ROOT"
