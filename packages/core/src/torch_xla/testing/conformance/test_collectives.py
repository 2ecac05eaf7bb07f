"""Collectives across processes, one per device, when the host has several devices.

`xmp.spawn` starts two processes (four when there are four devices, to cover replica
groups); each runs every collective and the results must equal eager PyTorch on the CPU.
"""

import pytest

import torch_xla.distributed.xla_multiprocessing as xmp
from torch_xla.testing import multiprocess


def test_collectives_match_eager_across_processes(plugin, plugin_record):
    chips = plugin.physical_chip_count()
    if chips < 2:
        pytest.skip(f"{plugin_record.name} has {chips} device on this host; collectives need 2")
    world = 4 if chips >= 4 else 2
    results = xmp.spawn(multiprocess.collectives_worker, nprocs=world)
    multiprocess.assert_collectives(results, world)
