"""Several devices in one process (CPU_NUM_DEVICES): placement, per-device graphs, moves."""

from __future__ import annotations

from .helpers import run_python

CODE = """
    import torch, torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    d0, d1 = xm.xla_device(0), xm.xla_device(1)
    a = torch.arange(4.0).to(d0)
    b = torch.arange(4.0).to(d1)
    c, e = a * 2, b + 1
    xm.mark_step()
    print(c.device, e.device, met.counter_value("UncachedCompile"))
    print(c.cpu().tolist(), e.cpu().tolist())
    moved = c.to(d1) + e
    print(moved.device, moved.cpu().tolist())
    try:
        a + b
    except RuntimeError as err:
        print("mixed:", "same device" in str(err))
    print(torch.xla.device_count())
"""


def test_two_devices_in_one_process():
    lines = (
        run_python(CODE, env={"CPU_NUM_DEVICES": "2", "PJRT_DEVICE": "CPU"}).strip().splitlines()
    )
    assert lines[-5] == "xla:0 xla:1 2"
    assert lines[-4] == "[0.0, 2.0, 4.0, 6.0] [1.0, 2.0, 3.0, 4.0]"
    assert lines[-3] == "xla:1 [1.0, 4.0, 7.0, 10.0]"
    assert lines[-2] == "mixed: True"
    assert lines[-1] == "2"
