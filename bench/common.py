"""Shared timing for the side-by-side benchmarks: eager CPU, torch-xla lazy, torch-xla
under `torch.compile(backend='openxla')` (dynamo), and the JAX floor.

The four modes are timed in interleaved windows (eager, lazy, dynamo, floor, eager, ...),
each window drained at both ends, and each mode's rate is its median window: on a
shared machine the load then shifts all modes alike instead of whichever ran last.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

WARMUP = 3
LOSS_RTOL, LOSS_ATOL = 1e-3, 1e-5  # lazy and dynamo compile different graphs
MODES = ("eager", "lazy", "dynamo", "floor")


def steps_per_second(step: Callable[[], None], drain: Callable[[], None], warmup: int, steps: int):
    for _ in range(warmup):
        step()
    drain()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    drain()
    return steps / (time.perf_counter() - start)


def median_rate(step: Callable[[], object], drain: Callable[[], None], windows: int,
                steps: int) -> float:
    """Steps/s of `step`: the median of `windows` windows of `steps` steps, each drained
    at both ends (warm up before calling)."""
    return statistics.median(steps_per_second(step, drain, 0, steps) for _ in range(windows))


def train_step(loss_fn: Callable, opt, x, y):
    """One training step as a user writes it; returns the loss tensor."""
    opt.zero_grad()
    loss = loss_fn(x, y)
    loss.backward()
    opt.step()
    return loss


# --- compile-cache accounting ------------------------------------------------------------


@dataclass
class CacheUse:
    """Program lookups over some steps. A hit is a sync that found its program
    (`CachedCompile`) or a call of a graph the dynamo bridge had already compiled
    (`RunCachedGraphInputData` samples); a miss is a compilation (`UncachedCompile`) or a
    new graph handed to the bridge (`DynamoExtractCompiledGraph`)."""

    sync_hits: int = 0
    graph_calls: int = 0
    compiles: int = 0
    new_graphs: int = 0

    @property
    def hits(self) -> int:
        return self.sync_hits + self.graph_calls

    @property
    def lookups(self) -> int:
        return self.hits + self.compiles + self.new_graphs

    @property
    def rate(self) -> float:
        return self.hits / self.lookups if self.lookups else math.nan

    def __add__(self, other: CacheUse) -> CacheUse:
        return CacheUse(*(a + b for a, b in zip(_fields(self), _fields(other), strict=True)))

    def __sub__(self, other: CacheUse) -> CacheUse:
        return CacheUse(*(a - b for a, b in zip(_fields(self), _fields(other), strict=True)))


def _fields(c: CacheUse) -> tuple:
    return c.sync_hits, c.graph_calls, c.compiles, c.new_graphs


def cache_snapshot() -> CacheUse:
    import torch_xla.debug.metrics as met

    calls = met.metric_data("RunCachedGraphInputData")
    return CacheUse(
        sync_hits=met.counter_value("CachedCompile") or 0,
        graph_calls=calls[0] if calls else 0,
        compiles=met.counter_value("UncachedCompile") or 0,
        new_graphs=met.counter_value("DynamoExtractCompiledGraph") or 0,
    )


# --- the modes ---------------------------------------------------------------------------


@dataclass
class Mode:
    """One way to run the step: `step()` runs one training step (returning its loss for
    the torch-xla modes), `drain()` waits for the device, `xla` says whether its compile
    cache use is counted."""

    step: Callable[[], object]
    drain: Callable[[], None]
    xla: bool = False
    rates: list = field(default_factory=list)
    cache: CacheUse = field(default_factory=CacheUse)
    last: object = None

    def warm_up(self) -> None:
        for _ in range(WARMUP):
            self.last = self.step()
        self.drain()

    def window(self, steps: int) -> None:
        before = cache_snapshot() if self.xla else None
        start = time.perf_counter()
        for _ in range(steps):
            self.last = self.step()
        self.drain()
        self.rates.append(steps / (time.perf_counter() - start))
        if self.xla:
            self.cache = self.cache + (cache_snapshot() - before)


def eager_mode(base, make_optimizer, loss_of, x, y, device: str = "cpu") -> Mode:
    """Plain PyTorch on `device` (the CPU, or `cuda` beside a GPU plugin)."""
    import copy

    import torch

    model = copy.deepcopy(base).to(device)
    opt = make_optimizer(model.parameters())
    x, y = x.to(device), y.to(device)

    def loss_fn(a, b):
        return loss_of(model, a, b)

    def drain():
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)

    return Mode(lambda: train_step(loss_fn, opt, x, y), drain)


def _on_device(base, make_optimizer, x, y):
    import copy

    import torch_xla

    device = torch_xla.device()
    model = copy.deepcopy(base).to(device)
    return model, make_optimizer(model.parameters()), x.to(device), y.to(device)


def lazy_mode(base, make_optimizer, loss_of, x, y) -> tuple[Mode, Callable[[], None]]:
    """torch-xla lazy mode: record the step, `xm.mark_step()`. Also returns the step
    without its sync, for `xla_host_cost`."""
    import torch_xla.core.xla_model as xm

    model, opt, xd, yd = _on_device(base, make_optimizer, x, y)

    def loss_fn(a, b):
        return loss_of(model, a, b)

    def step():
        loss = train_step(loss_fn, opt, xd, yd)
        xm.mark_step()
        return loss

    return Mode(step, xm.wait_device_ops, xla=True), lambda: train_step(loss_fn, opt, xd, yd)


def dynamo_mode(base, make_optimizer, loss_of, x, y) -> Mode:
    """torch-xla under dynamo, as upstream's guide trains: the forward (model and loss) is
    compiled with `torch.compile(backend='openxla')`, so AOTAutograd compiles it and its
    backward; the optimizer step is recorded lazily; `torch_xla.sync()` ends the step."""
    import torch

    import torch_xla
    import torch_xla.core.xla_model as xm

    model, opt, xd, yd = _on_device(base, make_optimizer, x, y)

    def loss_fn(a, b):
        return loss_of(model, a, b)

    compiled = torch.compile(loss_fn, backend="openxla")

    def step():
        loss = train_step(compiled, opt, xd, yd)
        torch_xla.sync()
        return loss

    return Mode(step, xm.wait_device_ops, xla=True)


def xla_host_cost(record: Callable[[], None], steps: int = 10) -> tuple[float, float, float]:
    """(ms recording forward+backward+optimizer, ms inside mark_step, us per recorded op),
    each measured with the device drained first so no device work is counted."""
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met

    rec, sync, ops = [], [], []
    for _ in range(steps):
        xm.wait_device_ops()
        created = met.counter_value("CreateXlaTensor") or 0
        t0 = time.perf_counter()
        record()
        t1 = time.perf_counter()
        xm.mark_step()
        t2 = time.perf_counter()
        xm.wait_device_ops()
        rec.append(t1 - t0)
        sync.append(t2 - t1)
        ops.append((met.counter_value("CreateXlaTensor") or 0) - created)
    rec_ms = 1e3 * sorted(rec)[len(rec) // 2]
    sync_ms = 1e3 * sorted(sync)[len(sync) // 2]
    n_ops = sorted(ops)[len(ops) // 2]
    return rec_ms, sync_ms, 1e3 * rec_ms / max(1, n_ops)


# --- the side-by-side run ----------------------------------------------------------------


@dataclass
class Figures:
    name: str
    steps: int  # per window
    windows: int
    rates: dict  # mode -> steps/s of each window, in the order run
    lazy_cache: CacheUse
    dynamo_cache: CacheUse
    lazy_loss: float
    dynamo_loss: float
    host: tuple = ()
    eager_device: str = "cpu"
    xla_device: str = "CPU"  # the plugin torch-xla ran on
    floor_device: str = "cpu"  # jax's platform for the floor
    load_average: tuple = field(default_factory=os.getloadavg)

    def median(self, mode: str) -> float:
        return statistics.median(self.rates[mode])

    @property
    def losses_match(self) -> bool:
        return math.isclose(self.lazy_loss, self.dynamo_loss, rel_tol=LOSS_RTOL,
                            abs_tol=LOSS_ATOL)


def testing_models():
    """torch_xla.testing.models loaded without importing torch_xla (the eager-only child
    must not register the xla device: see `eager_apart`)."""
    package = importlib.util.find_spec("torch_xla").submodule_search_locations[0]
    spec = importlib.util.spec_from_file_location(
        "bench_models", os.path.join(package, "testing", "models.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dynamo looks the model's module up by name
    spec.loader.exec_module(module)
    return module


def apart(device: str) -> bool:
    """Whether eager on `device` must run in a process without torch_xla. Registering
    the xla device (torch's PrivateUse1 backend) makes it torch's current accelerator, and
    from then on torch's autograd engine asserts (`opt_ready_stream && opt_parent_stream`)
    on every backward over CUDA tensors (torch >= 2.8, pytorch/pytorch#161129)."""
    return device != "cpu"


def eager_only(base, make_optimizer, loss_of, x, y, args) -> None:
    """The eager mode alone (this process never imports torch_xla): rates to --json."""
    mode = eager_mode(base, make_optimizer, loss_of, x, y, args.eager_device)
    mode.warm_up()
    for _ in range(args.windows):
        mode.window(args.steps)
    with open(args.json, "w") as out:
        json.dump({"rates": mode.rates}, out)


def eager_apart(script: str, args) -> list[float]:
    """Eager rates measured by `script --eager-only` in a child process, before the
    other modes (so not interleaved with them; see `apart`)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "eager.json")
        subprocess.run([sys.executable, script, "--eager-only", "--eager-device",
                        args.eager_device, "--steps", str(args.steps), "--windows",
                        str(args.windows), "--json", path], check=True)
        with open(path) as f:
            return json.load(f)["rates"]


def measure_modes(name: str, base, make_optimizer, loss_of, x, y, floor: Callable[[], Mode],
                  steps: int, windows: int, eager_device: str = "cpu",
                  eager_rates: list[float] | None = None) -> Figures:
    """All four modes, warmed up, then `windows` rounds of `steps` steps each, interleaved.

    `loss_of(model, x, y)` is the forward and the loss; `make_optimizer(params)` builds
    the optimizer; `floor()` builds the JAX step (after the XLA device is set up: it
    fixes jax's CPU device count). Lazy and dynamo start from copies of `base`
    and take the same steps on the same batch, so their last losses must agree. Eager
    runs on `eager_device`, or was measured apart (`eager_rates`, see `eager_apart`).
    """
    lazy, record = lazy_mode(base, make_optimizer, loss_of, x, y)
    modes = {} if eager_rates else {
        "eager": eager_mode(base, make_optimizer, loss_of, x, y, eager_device)}
    modes.update(lazy=lazy, dynamo=dynamo_mode(base, make_optimizer, loss_of, x, y),
                 floor=floor())
    for mode in modes.values():
        mode.warm_up()
    for _ in range(windows):
        for mode in modes.values():
            mode.window(steps)
    dynamo = modes["dynamo"]
    lazy_loss, dynamo_loss = float(lazy.last.item()), float(dynamo.last.item())
    rates = {"eager": eager_rates} if eager_rates else {}
    rates.update({k: m.rates for k, m in modes.items()})
    return Figures(name, steps, windows, rates, lazy.cache,
                   dynamo.cache, lazy_loss, dynamo_loss, xla_host_cost(record),
                   eager_device=eager_device, xla_device=_xla_device_type(),
                   floor_device=_floor_platform())


def _xla_device_type() -> str:
    import torch_xla.runtime as xr

    return xr.device_type()


def _floor_platform() -> str:
    import jax

    return jax.devices()[0].platform


def _cache_line(c: CacheUse) -> str:
    return (f"{c.hits}/{c.lookups} hits ({100 * c.rate:.0f}%: {c.sync_hits} cached syncs, "
            f"{c.graph_calls} compiled-graph calls, {c.compiles} compiles, "
            f"{c.new_graphs} new dynamo graphs)")


def report(f: Figures) -> None:
    rec_ms, sync_ms, us_per_op = f.host
    floor = f.median("floor")
    print(
        f"{f.name} [torch-xla on {f.xla_device}, jax floor on {f.floor_device}]: "
        f"eager-{f.eager_device} {f.median('eager'):.1f} | lazy {f.median('lazy'):.1f} | "
        f"dynamo {f.median('dynamo'):.1f} | jax-jit floor {floor:.1f} steps/s (median of "
        f"{f.windows} interleaved windows of {f.steps} steps) | lazy/floor "
        f"{f.median('lazy') / floor:.2f}x, dynamo/floor {f.median('dynamo') / floor:.2f}x | "
        f"lazy record {rec_ms:.1f} ms, mark_step {sync_ms:.2f} ms, {us_per_op:.1f} us/op | "
        "load average " + " ".join(f"{v:.2f}" for v in f.load_average)
    )
    timed = f.steps * f.windows
    print(f"  compile cache over the {timed} timed steps: lazy {_cache_line(f.lazy_cache)}; "
          f"dynamo {_cache_line(f.dynamo_cache)}")
    for mode, c in (("lazy", f.lazy_cache), ("dynamo", f.dynamo_cache)):
        if c.hits != c.lookups:
            print(f"  WARNING: {mode} mode is not at 100% compile-cache hits in steady state: "
                  f"{c.lookups - c.hits} misses in the timed steps (something recompiles; "
                  "compare torch_xla.debug.metrics reports of two steps)")
    print(f"  loss after {WARMUP + timed} steps: lazy {f.lazy_loss:.6f}, "
          f"dynamo {f.dynamo_loss:.6f}")
    if not f.losses_match:
        print(f"  WARNING: the dynamo-mode loss {f.dynamo_loss:.6f} differs from the lazy-mode "
              f"loss {f.lazy_loss:.6f} beyond rtol {LOSS_RTOL}, atol {LOSS_ATOL}: same seed, "
              "same steps, so the compiled step computes something else")


def to_json(f: Figures) -> dict:
    out = asdict(f)
    for mode in MODES:
        out[mode] = f.median(mode)
    for mode in ("lazy", "dynamo"):
        c = getattr(f, f"{mode}_cache")
        out[f"{mode}_cache"].update(hits=c.hits, lookups=c.lookups, rate=c.rate)
    out["host"] = dict(zip(("record_ms", "mark_step_ms", "us_per_op"), f.host, strict=True))
    out["losses_match"] = f.losses_match
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10, help="timed steps per window")
    parser.add_argument("--windows", type=int, default=5,
                        help="timed windows per mode, interleaved across the modes")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH as JSON")
    parser.add_argument("--eager-device", default="cpu",
                        help="torch device of the eager mode (cuda beside PJRT_DEVICE=CUDA; "
                        "measured in a child process without torch_xla)")
    parser.add_argument("--eager-only", action="store_true",
                        help="(internal) time only the eager mode, rates to --json")
    return parser.parse_args()


def finish(f: Figures, json_path: str | None) -> None:
    report(f)
    if json_path:
        with open(json_path, "w") as out:
            json.dump(to_json(f), out, indent=1)
