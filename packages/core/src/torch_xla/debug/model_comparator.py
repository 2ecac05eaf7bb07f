"""Compare a model's intermediate tensors between two runs (PyTorch/XLA's model comparator).

Put `mc.save(name, tensor)` at the points of the forward to watch, run the model once
per configuration with a different folder, then compare the folders:

    import torch_xla.debug.model_comparator as mc

    mc.configure("/tmp/run_cpu")     # or MODELCMP_SAVEDIR=/tmp/run_cpu
    model(x)                         # on the CPU
    mc.configure("/tmp/run_xla")
    xla_model(xla_x)                 # the same model on the XLA device
    print(mc.compare("/tmp/run_cpu", "/tmp/run_xla", rtol=1e-3, atol=1e-3))

`save` writes `<name>.<k>` (the k-th tensor saved under that name; under `step-<n>/`
when a step is given) with `torch.save`, atomically, from the master ordinal only, and
returns the tensor, so it can stay in the code: without a folder configured it does
nothing. A `None` name is replaced by the caller's `file.l<line>`. `compare` returns a
report of the differences (empty when the runs agree): tensors saved by one run only,
tensors of different shapes, and up to `max_diffs` elements per tensor where
|a - b| > atol + rtol * |b|. `python -m torch_xla.debug.model_comparator DIR1 DIR2`
prints it and exits 1 when it is not empty.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import traceback

import torch

from torch_xla._atomic import atomic_open
from torch_xla.core import xla_model as xm

_state: dict = {"folder": None, "ids": {}, "step": None}
_SAVED = re.compile(r"(.*)\.(\d+)$")


def configure(save_dir: str | None) -> None:
    """Save into `save_dir` from now on (None: only MODELCMP_SAVEDIR, if set); counts
    restart."""
    _state.update(folder=save_dir, ids={}, step=None)


def _folder() -> str | None:
    return _state["folder"] or os.environ.get("MODELCMP_SAVEDIR") or None


def _caller_name() -> str:
    here = os.path.abspath(__file__)
    for frame in reversed(traceback.extract_stack()[:-1]):
        if os.path.abspath(frame.filename) != here:
            return f"{os.path.basename(frame.filename)}.l{frame.lineno}"
    return "noname"


def save(name: str | None, tensor: torch.Tensor, step: int | None = None) -> torch.Tensor:
    """Save `tensor` (moved to the CPU) as the next `<name>.<k>` of the configured folder;
    returns `tensor`."""
    folder = _folder()
    if folder is None:
        return tensor
    host = tensor.detach().cpu()
    if not xm.is_master_ordinal():
        return tensor
    name = _caller_name() if name is None else name
    if step is not None:
        folder = os.path.join(folder, f"step-{step}")
        os.makedirs(folder, exist_ok=True)
        if step != _state["step"]:
            _state.update(step=step, ids={})
    index = _state["ids"].get(name, 0)
    _state["ids"][name] = index + 1
    with atomic_open(os.path.join(folder, f"{name}.{index}")) as f:
        torch.save(host, f)
    return tensor


def compare_tensors(tensor1: torch.Tensor, tensor2: torch.Tensor, rtol: float = 1e-05,
                    atol: float = 1e-08, max_diffs: int = 25) -> str:
    """The differences between two tensors, one line per element (at most `max_diffs`)."""
    if list(tensor1.shape) != list(tensor2.shape):
        return f"Tensors have different shape: {list(tensor1.shape)} vs. {list(tensor2.shape)}\n"
    a, b = tensor1.detach().cpu().double(), tensor2.detach().cpu().double()
    differ = ((a - b).abs() > atol + rtol * b.abs()).flatten().nonzero().flatten().tolist()
    lines = []
    for count, flat in enumerate(differ):
        if count == max_diffs:
            lines.append(f"... aborting after {max_diffs} differences")
            break
        index = list(torch.unravel_index(torch.tensor(flat), tensor1.shape)) if tensor1.dim() \
            else []
        lines.append(f"{[int(i) for i in index]}: {a.flatten()[flat].item()} vs. "
                     f"{b.flatten()[flat].item()}")
    return "".join(line + "\n" for line in lines)


def _saved_files(folder: str) -> set[str]:
    """The saved tensors under `folder`, as paths relative to it."""
    found = set()
    for root, _, names in os.walk(folder):
        for name in names:
            if _SAVED.match(name):
                found.add(os.path.relpath(os.path.join(root, name), folder))
    return found


def tensor_file_compare(path1: str, path2: str, rtol: float = 1e-05, atol: float = 1e-08,
                        max_diffs: int = 25) -> str:
    """`compare_tensors` of two saved files, headed by the tensor's name, id and step."""
    report = compare_tensors(torch.load(path1, weights_only=True),
                             torch.load(path2, weights_only=True), rtol, atol, max_diffs)
    if not report:
        return ""
    name, index = _SAVED.match(os.path.basename(path1)).groups()
    step = re.match(r"step-(\d+)$", os.path.basename(os.path.dirname(path1)))
    where = f" at step={step.group(1)}" if step else ""
    lines = "".join(f"  {line}\n" for line in report.splitlines())
    return f'Changes in saved tensor "{name}" with id={index}{where}\n{lines}'


def compare(save_dir1: str, save_dir2: str, rtol: float = 1e-05, atol: float = 1e-08,
            max_diffs: int = 25) -> str:
    """The differences between two folders written by `save` (empty: the runs agree)."""
    files1, files2 = _saved_files(save_dir1), _saved_files(save_dir2)
    report = ""
    for path in sorted(files1 | files2):
        if path not in files2:
            report += f"Mismatch: {path} not in {save_dir2}\n"
        elif path not in files1:
            report += f"Mismatch: {path} not in {save_dir1}\n"
        else:
            report += tensor_file_compare(os.path.join(save_dir1, path),
                                          os.path.join(save_dir2, path), rtol, atol, max_diffs)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Compare two model-comparator folders.")
    parser.add_argument("--rtol", type=float, default=1e-05)
    parser.add_argument("--atol", type=float, default=1e-08)
    parser.add_argument("--max_diffs", type=int, default=25)
    parser.add_argument("savedir1", metavar="SAVEDIR1")
    parser.add_argument("savedir2", metavar="SAVEDIR2")
    args = parser.parse_args(argv)
    report = compare(args.savedir1, args.savedir2, args.rtol, args.atol, args.max_diffs)
    if report:
        print(report, file=sys.stderr)
    return 1 if report else 0


if __name__ == "__main__":
    sys.exit(main())
