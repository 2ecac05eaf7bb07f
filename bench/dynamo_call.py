"""Host time of one `torch.compile(backend='openxla')` call of a small MLP (16 -> 32 -> 4,
batch 8): inference, and forward + backward, against dispatching the same compiled XLA
programs directly.

    python bench/dynamo_call.py

Each sample drains the device first, so what is timed is the host's work up to the
dispatch of the last program (on the CPU plugin small programs run inline, so their
execution is in every column). Four timings: the whole call; the bridge's compiled
graphs called directly with the arguments one call gave them (gathering input buffers,
running the program, wrapping outputs); the same programs through the engine's
`graph.run_program` (which notes each execution for the execution clock, checked once the
programs ran: done ones are timed at once, the rest on the clock's thread); and
the programs alone, re-run with the same buffers straight through jax. Differences:
the bridge's own work, the clock's, and what dynamo's guards, AOTAutograd's wrappers and
the autograd engine add.

Two backward variants: `backward()` lets autograd make the root gradient (`ones_like`, a
pending tensor the bridge must compute before the backward program: one more
execution, as in PyTorch/XLA); `backward(one)` passes a gradient already on the device.

Last, torch's own floor: the same calls compiled with `backend="aot_eager"` on plain CPU
tensors (dynamo's guards, AOTAutograd's wrappers and the autograd engine running eager
kernels of this tiny model), and the step in eager PyTorch, which is what any backend's
call costs before its own work.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import nn

import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla._dynamo import dynamo_bridge
from torch_xla.lazy import graph
from torch_xla.pjrt.client import client

SAMPLES = 300


def quantiles_ms(fn: Callable[[], object], samples: int = SAMPLES) -> tuple[float, float]:
    """(10th percentile, median) of `samples` timings in ms: on a shared machine the low
    percentile is the closer estimate of the work itself."""
    times = []
    for _ in range(samples):
        xm.wait_device_ops()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    xm.wait_device_ops()
    times.sort()
    return 1e3 * times[len(times) // 10], 1e3 * times[len(times) // 2]


def runs_of(step: Callable[[], object]) -> tuple[list, list]:
    """What one call of `step` runs: the bridge's compiled graphs with their arguments,
    and the (program, input arrays) pairs."""
    graphs, programs = [], []
    run_program, call = graph.run_program, dynamo_bridge.CompiledGraph.__call__

    def program_spy(device, program, arrays, *rest):
        programs.append((program, list(arrays)))
        return run_program(device, program, arrays, *rest)

    def graph_spy(compiled, *args):
        graphs.append((compiled, args))
        return call(compiled, *args)

    graph.run_program, dynamo_bridge.CompiledGraph.__call__ = program_spy, graph_spy
    try:
        step()
    finally:
        graph.run_program, dynamo_bridge.CompiledGraph.__call__ = run_program, call
    return graphs, programs


def measure(label: str, step: Callable[[], object]) -> None:
    for _ in range(5):
        step()
    torch_xla.sync()
    call = quantiles_ms(step)
    graphs, programs = runs_of(step)
    bridge = quantiles_ms(lambda: [c(*a) for c, a in graphs])

    def engine_runs() -> None:
        for c, a in graphs:
            if c.program is not None:
                graph.run_program(c.device, c.program, c._inputs(a))
        client().check_executions()  # as each launcher does once it has its results

    engine = quantiles_ms(engine_runs)
    floor = quantiles_ms(lambda: [p.run(a) for p, a in programs])
    print(f"dynamo_call {label}: {len(programs)} programs | p10/median ms: whole call "
          f"{call[0]:.3f}/{call[1]:.3f}, bridge calls {bridge[0]:.3f}/{bridge[1]:.3f}, "
          f"run_program {engine[0]:.3f}/{engine[1]:.3f}, programs alone "
          f"{floor[0]:.3f}/{floor[1]:.3f} | the bridge's own {bridge[0] - engine[0]:.3f} ms, "
          f"run_program's clock {engine[0] - floor[0]:.3f} ms, dynamo+AOTAutograd+autograd "
          f"{call[0] - bridge[0]:.3f} ms")


def tiny_mlp() -> nn.Module:
    """The benchmark's model (16 -> 32 -> 4), seeded: the same weights in every mode."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def main() -> None:
    device = torch_xla.device()
    model = tiny_mlp().to(device)
    x = torch.randn(8, 16).to(device)
    one = torch.ones(()).to(device)
    loss_of = torch.compile(lambda inp: model(inp).square().mean(), backend="openxla")

    def infer() -> None:
        with torch.no_grad():
            loss_of(x)

    def train(gradient: torch.Tensor | None) -> None:
        model.zero_grad(set_to_none=True)
        loss_of(x).backward(gradient)

    measure("inference (no_grad)", infer)
    measure("backward()", lambda: train(None))
    measure("backward(one)", lambda: train(one))
    torch_floor()


def torch_floor() -> None:
    """The same calls with `backend="aot_eager"` on CPU tensors, and in eager PyTorch."""
    model = tiny_mlp()
    x = torch.randn(8, 16)

    def loss(inp: torch.Tensor) -> torch.Tensor:
        return model(inp).square().mean()

    compiled = torch.compile(loss, backend="aot_eager")
    for label, fn in (("aot_eager", compiled), ("eager", loss)):
        def infer(fn=fn) -> None:
            with torch.no_grad():
                fn(x)

        def train(fn=fn) -> None:
            model.zero_grad(set_to_none=True)
            fn(x).backward()

        for _ in range(5):
            infer()
            train()
        inference, training = quantiles_ms(infer), quantiles_ms(train)
        print(f"torch alone, {label} on CPU tensors | p10/median ms: inference "
              f"{inference[0]:.3f}/{inference[1]:.3f}, training backward() "
              f"{training[0]:.3f}/{training[1]:.3f}")


if __name__ == "__main__":
    main()
