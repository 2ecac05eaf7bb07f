"""What PyTorch/XLA's example and test scripts import as `torch_xla.test.test_utils`.

Progress lines (`| Training Device=xla:0/0 Step=10 Loss=0.12345 ...`) and
TensorBoard summaries through `torch.utils.tensorboard` (the `tensorboard`
package must be installed to create a writer).
"""

from __future__ import annotations

import multiprocessing
import time
import unittest
from collections.abc import Callable
from datetime import datetime
from typing import Any

import torch_xla.debug.metrics as met
import torch_xla.debug.metrics_compare_utils as mcu
import torch_xla.runtime as xr


def mp_test(func: Callable) -> Callable:
    """Run a `unittest.TestCase` method in a process of its own; it must exit with 0.

    Returns the child's exit code.
    """

    def wrapper(*args: Any, **kwargs: Any) -> int | None:
        proc = multiprocessing.Process(target=func, args=args, kwargs=kwargs)
        proc.start()
        proc.join()
        if args and isinstance(args[0], unittest.TestCase):
            args[0].assertEqual(proc.exitcode, 0)
        return proc.exitcode

    return wrapper


def _get_device_spec(device: Any) -> str:
    """`xla:0/3`: the device and this process's global ordinal."""
    return f"{device}/{xr.global_ordinal()}"


def write_to_summary(
    summary_writer: Any,
    global_step: int | None = None,
    dict_to_write: dict[str, float] | None = None,
    write_xla_metrics: bool = False,
) -> None:
    """Write each scalar of `dict_to_write` and, optionally, every metrics-report figure.

    With `write_xla_metrics`, each data point of `met.metrics_report()` (see
    `metrics_compare_utils.parse_metrics_report`) is a scalar, plus `aten_ops_sum`,
    the total of the CPU-fallback counters. A None writer writes nothing.
    """
    if summary_writer is None:
        return
    for name, value in (dict_to_write or {}).items():
        summary_writer.add_scalar(name, value, global_step)
    if write_xla_metrics:
        points = mcu.parse_metrics_report(met.metrics_report())
        for name, value in points.items():
            summary_writer.add_scalar(name, value, global_step)
        aten_ops_sum = sum(v for n, v in points.items() if n.startswith("aten::"))
        summary_writer.add_scalar("aten_ops_sum", aten_ops_sum, global_step)


def close_summary_writer(summary_writer: Any) -> None:
    """Flush and close `summary_writer` (nothing for None)."""
    if summary_writer is not None:
        summary_writer.flush()
        summary_writer.close()


def get_summary_writer(logdir: str | None) -> Any:
    """A TensorBoard `SummaryWriter` on `logdir` (None when `logdir` is empty).

    It starts with the scalar `TensorboardStartTimestamp` at step 0.
    """
    if not logdir:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        raise ImportError(
            f"get_summary_writer({logdir!r}) needs the `tensorboard` package: "
            "`pip install tensorboard`, or pass logdir=None to write no summaries."
        ) from e
    writer = SummaryWriter(log_dir=logdir)
    write_to_summary(writer, 0, dict_to_write={"TensorboardStartTimestamp": time.time()})
    return writer


def now(format: str = "%H:%M:%S") -> str:
    return datetime.now().strftime(format)


def _print_update(items: list[str | None]) -> None:
    print("|", " ".join(item for item in items if item), flush=True)


def print_training_update(
    device: Any,
    step: int,
    loss: float,
    rate: float,
    global_rate: float,
    epoch: int | None = None,
    summary_writer: Any = None,
) -> None:
    """Print one training progress line; with a writer, also log the two rates."""
    _print_update([
        "Training",
        f"Device={_get_device_spec(device)}",
        f"Epoch={epoch}" if epoch is not None else None,
        f"Step={step}",
        f"Loss={loss:.5f}",
        f"Rate={rate:.2f}",
        f"GlobalRate={global_rate:.2f}",
        f"Time={now()}",
    ])
    if summary_writer:
        write_to_summary(
            summary_writer,
            dict_to_write={"examples/sec": rate, "average_examples/sec": global_rate},
        )


def print_test_update(
    device: Any, accuracy: float | None, epoch: int | None = None, step: int | None = None
) -> None:
    """Print one evaluation line."""
    _print_update([
        "Test",
        f"Device={_get_device_spec(device)}",
        f"Step={step}" if step is not None else None,
        f"Epoch={epoch}" if epoch is not None else None,
        f"Accuracy={accuracy:.2f}" if accuracy is not None else None,
        f"Time={now()}",
    ])
