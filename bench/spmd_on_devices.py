"""Host cost of `pjrt.spmd.on_devices`, which every SPMD sync runs over a program's inputs.

    PJRT_DEVICE=CPU CPU_NUM_DEVICES=4 python bench/spmd_on_devices.py [--inputs 200]

Lays `--inputs` arrays over the 4 CPU devices the way a training step's inputs lie
(a third sharded on one mesh, the rest replicated on it) and times `on_devices` over
them, in thread CPU time with garbage collection off: once with every input on one mesh,
and once with a tenth of the sharded ones on a mesh ordering the devices [3, 1, 2, 0]
(the inputs are then re-laid out in one device order, `spmd.in_order`). Prints the
median and the 10th-90th percentile range in microseconds per call.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from torch_xla.pjrt import spmd
from torch_xla.pjrt.client import client

CALLS = 300


def inputs(count: int, reordered: bool) -> tuple[list[jax.Array], tuple]:
    devices = tuple(client().global_devices)  # the plugin's devices, as the engine has them
    mesh = Mesh(np.array(devices), ("x",))
    other = Mesh(np.array(devices)[[3, 1, 2, 0]], ("x",))
    arrays = []
    for k in range(count):
        on = other if reordered and k % 30 == 0 else mesh
        spec = PartitionSpec("x") if k % 3 == 0 else PartitionSpec()
        arrays.append(jax.device_put(np.ones(64, np.float32), NamedSharding(on, spec)))
    return arrays, devices


def timed(arrays: list[jax.Array], devices: tuple) -> list[float]:
    spmd.on_devices(arrays, devices)  # first call: caches warm
    gc.collect()
    gc.disable()
    times = []
    for _ in range(CALLS):
        start = time.thread_time()
        spmd.on_devices(arrays, devices)
        times.append(1e6 * (time.thread_time() - start))
    gc.enable()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=200)
    count = parser.parse_args().inputs
    found = len(client().global_devices)
    if found != 4:
        raise SystemExit(f"needs 4 devices, found {found}: run with PJRT_DEVICE=CPU "
                         "CPU_NUM_DEVICES=4")
    for name, reordered in (("one mesh", False), ("two device orders", True)):
        times = timed(*inputs(count, reordered))
        deciles = statistics.quantiles(times, n=10)
        print(f"spmd_on_devices: {count} inputs, {name}: median {statistics.median(times):.0f} "
              f"us per call (p10-p90 {deciles[0]:.0f}-{deciles[-1]:.0f})")


if __name__ == "__main__":
    main()
