"""The small GPT of bench/small_gpt.py trained with SGD under SPMD on 1, 2, 4 and 8 CPU
devices: data parallel and FSDPv2, against eager CPU PyTorch.

    python bench/spmd_gpt.py                # full run: writes docs/images/spmd-gpt.{json,md,png}
    python bench/spmd_gpt.py --quick        # 2 devices, few steps, into a temp folder

The global batch stays at small_gpt's BATCH (16 sequences of T=64 tokens) for every
device count, so more devices means fewer sequences per device. Each (mode, devices)
point runs in its own process: CPU_NUM_DEVICES is read once, when the process starts.

- dp: a 1-d mesh ('data',) over every device; parameters replicated, batch sharded on
  dim 0 along 'data'.
- fsdp: a 1-d mesh ('fsdp',); the model wrapped in FSDPv2 with each Block its own unit;
  batch sharded on dim 0 along 'fsdp'.
- eager: the same model, batch and SGD step in plain PyTorch on the CPU (reference).

Reported per point: steps/s, the median over --windows timed windows of --steps steps
(each window drained at both ends, warm-up steps excluded), and the parameter bytes one
device holds: the sum over parameters of device 0's tile (`local_shards`), read after
training.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "docs" / "images"
MODES = ("dp", "fsdp")
LABELS = {"dp": "data parallel", "fsdp": "FSDPv2", "eager": "eager CPU PyTorch"}
LR = 0.01


# --- one point, in its own process -----------------------------------------------------


def _batch():
    import torch
    from small_gpt import BATCH, VOCAB, T

    torch.manual_seed(0)
    tokens = torch.randint(0, VOCAB, (BATCH, T + 1))
    return tokens[:, :-1], tokens[:, 1:]


def _warm_up(step, drain, warmup: int) -> None:
    for _ in range(warmup):
        step()
    drain()


def _timed_windows(step, drain, steps: int, windows: int) -> list[float]:
    """steps/s of each timed window (warm up first: compilation is not to be timed)."""
    rates = []
    for _ in range(windows):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        drain()
        rates.append(steps / (time.perf_counter() - start))
    return rates


def _eager_point(args: argparse.Namespace) -> dict:
    import torch
    from small_gpt import GPT, torch_step

    x, y = _batch()
    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    _warm_up(lambda: torch_step(model, opt, x, y), lambda: None, args.warmup)
    rates = _timed_windows(lambda: torch_step(model, opt, x, y), lambda: None,
                           args.steps, args.windows)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"rates": rates, "param_bytes_per_device": nbytes,
            "torch_threads": torch.get_num_threads()}


def _device0_bytes(param) -> int:
    import torch_xla.distributed.spmd as xs

    shards = xs.XLAShardedTensor(param).local_shards
    tile = next(s for s in shards if s.shard_device.endswith(":0"))
    return tile.data.numel() * tile.data.element_size()


def _spmd_model(mode: str, n: int):
    """(model on xla:0 laid out for `mode`, its mesh, the mesh axis the batch goes on)."""
    import functools

    import numpy as np
    import torch
    from small_gpt import GPT, Block

    import torch_xla
    import torch_xla.distributed.spmd as xs
    from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from torch_xla.experimental.spmd_fully_sharded_data_parallel import (
        SpmdFullyShardedDataParallel as FSDPv2,
    )

    torch.manual_seed(0)
    model = GPT()
    if mode == "dp":
        return model.to(torch_xla.device()), xs.Mesh(np.arange(n), (n,), ("data",)), "data"
    mesh = xs.Mesh(np.arange(n), (n,), ("fsdp",))
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    return FSDPv2(model, mesh=mesh, auto_wrap_policy=policy), mesh, "fsdp"


def _spmd_point(args: argparse.Namespace) -> dict:
    import torch
    from small_gpt import torch_step

    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    xr.use_spmd()
    n = xr.global_runtime_device_count()
    if n != args.devices:
        raise RuntimeError(f"asked for {args.devices} devices, the runtime has {n}: start the "
                           f"process with PJRT_DEVICE=CPU CPU_NUM_DEVICES={args.devices}")
    model, mesh, axis = _spmd_model(args.mode, n)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = (t.to(torch_xla.device()) for t in _batch())
    for t in (x, y):
        xs.mark_sharding(t, mesh, (axis, None))

    def step():
        torch_step(model, opt, x, y)
        torch_xla.sync()

    _warm_up(step, xm.wait_device_ops, args.warmup)
    compiled = _compile_count()
    rates = _timed_windows(step, xm.wait_device_ops, args.steps, args.windows)
    nbytes = sum(_device0_bytes(p) for p in model.parameters())
    return {"rates": rates, "param_bytes_per_device": nbytes,
            "compiles_in_warmup": compiled, "compiles_timed": _compile_count() - compiled}


def _compile_count() -> int:
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return data[0] if data else 0


def run_point(args: argparse.Namespace) -> None:
    import torch_xla.core.xla_model  # noqa: F401 - before any backward: autograd sizes its queues

    result = _eager_point(args) if args.mode == "eager" else _spmd_point(args)
    result.update(mode=args.mode, devices=args.devices,
                  steps_per_s=statistics.median(result["rates"]))
    print("RESULT " + json.dumps(result), flush=True)


# --- the driver: one subprocess per point, then JSON, table and plot -------------------


def _spawn(mode: str, devices: int, args: argparse.Namespace) -> dict:
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices))
    env.pop("XLA_USE_SPMD", None)  # the point turns SPMD on itself (eager must not)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--point", mode,
           "--devices", str(devices), "--steps", str(args.steps),
           "--windows", str(args.windows), "--warmup", str(args.warmup)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"point {mode} x{devices} failed (exit {proc.returncode}); "
                           f"command: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    if result.get("compiles_timed"):
        print(f"  warning: {mode} x{devices} compiled {result['compiles_timed']} graph(s) in "
              "its timed windows: raise --warmup", flush=True)
    print(f"  {LABELS[mode]:>18} x{devices}: {result['steps_per_s']:.2f} steps/s, "
          f"{result['param_bytes_per_device'] / 2**20:.3f} MiB params/device "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return result


def markdown_table(results: dict) -> str:
    eager = results["eager"]
    rows = ["| mode | devices | steps/s (median) | timed windows, steps/s | x eager CPU "
            "| parameter MiB per device |",
            "|---|---|---|---|---|---|"]
    for r in [eager, *results["points"]]:
        windows = " / ".join(f"{v:.1f}" for v in r["rates"])
        rows.append(f"| {LABELS[r['mode']]} | {r['devices']} | {r['steps_per_s']:.2f} | "
                    f"{windows} | {r['steps_per_s'] / eager['steps_per_s']:.2f}x | "
                    f"{r['param_bytes_per_device'] / 2**20:.3f} |")
    return "\n".join(rows) + "\n"


def plot(results: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (speed, memory) = plt.subplots(1, 2, figsize=(10, 4))
    for mode, marker in zip(MODES, "os", strict=True):
        pts = [r for r in results["points"] if r["mode"] == mode]
        devs = [r["devices"] for r in pts]
        speed.plot(devs, [r["steps_per_s"] for r in pts], marker=marker, label=LABELS[mode])
        memory.plot(devs, [r["param_bytes_per_device"] / 2**20 for r in pts], marker=marker,
                    label=LABELS[mode])
    speed.axhline(results["eager"]["steps_per_s"], color="gray", linestyle="--",
                  label=LABELS["eager"])
    cfg = results["config"]
    speed.set(xlabel="CPU devices", ylabel="steps/s (median)",
              title=f"small GPT, SGD, global batch {cfg['global_batch']}")
    memory.set(xlabel="CPU devices", ylabel="MiB",
               title="parameter bytes per device")
    for ax in (speed, memory):
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
        ax.set_xticks(cfg["devices"], [str(d) for d in cfg["devices"]])
        ax.set_ylim(bottom=0)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def drive(args: argparse.Namespace) -> None:
    from small_gpt import BATCH, HEADS, LAYERS, VOCAB, D, T

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = {"devices": args.devices_list, "steps_per_window": args.steps,
              "windows": args.windows, "warmup_steps": args.warmup, "optimizer": f"SGD lr={LR}",
              "global_batch": BATCH, "seq_len": T, "vocab": VOCAB, "d_model": D,
              "heads": HEADS, "layers": LAYERS}
    print(f"spmd_gpt: global batch {BATCH} x T={T} for every device count; "
          f"{args.windows} windows of {args.steps} steps after {args.warmup} warm-up", flush=True)
    results = {"config": config, "eager": _spawn("eager", 1, args),
               "points": [_spawn(mode, n, args) for mode in MODES for n in args.devices_list],
               "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                           "loadavg_at_end": os.getloadavg(),
                           "date": time.strftime("%Y-%m-%d %H:%M")}}
    table = markdown_table(results)
    (out / "spmd-gpt.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "spmd-gpt.md").write_text(table)
    print(table)
    print(f"wrote {out / 'spmd-gpt.json'}, {out / 'spmd-gpt.md'}, "
          f"{plot(results, out / 'spmd-gpt.png')}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8],
                   help="device counts (driver) or this point's count (--point)")
    p.add_argument("--steps", type=int, default=10, help="steps per timed window")
    p.add_argument("--windows", type=int, default=5, help="timed windows (median reported)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation)")
    p.add_argument("--out-dir", default=None,
                   help=f"where the JSON, table and plot go (default {DEFAULT_OUT}; "
                        "with --quick a temp folder)")
    p.add_argument("--quick", action="store_true",
                   help="2 devices only, 2 windows of 2 steps after 2 warm-up: a smoke run")
    p.add_argument("--point", choices=("eager", *MODES), help=argparse.SUPPRESS)
    if p.parse_known_args(argv)[0].quick:  # quick sets defaults; explicit flags still win
        p.set_defaults(devices=[2], steps=2, windows=2, warmup=2)
    args = p.parse_args(argv)
    if args.out_dir is None:
        args.out_dir = tempfile.mkdtemp(prefix="spmd-gpt-") if args.quick else DEFAULT_OUT
    args.devices_list = args.devices
    if args.point:
        args.mode, args.devices = args.point, args.devices[0]
    return args


if __name__ == "__main__":
    parsed = parse_args()
    if parsed.point:
        run_point(parsed)
    else:
        drive(parsed)
