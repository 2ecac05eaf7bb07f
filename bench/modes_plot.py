"""Eager CPU, torch-xla lazy, torch-xla under dynamo and the JAX floor, side by side:
runs bench/mnist_cnn.py and bench/small_gpt.py (each in its own process, --runs times,
alternating) and draws steps/s per mode against the floor.

    python bench/modes_plot.py                 # 3 runs each: docs/images/modes.{json,png}
    python bench/modes_plot.py --runs 1 --steps 3 --windows 2 --out-dir /tmp/modes  # smoke
    python bench/modes_plot.py --replot        # redraw from docs/images/modes.json

Each benchmark times the four modes in interleaved windows and reports each mode's
median window (bench/common.py). modes.json holds every run's figures as the benchmarks
write them (`--json PATH`): every window's steps/s per mode, the compile-cache use over
the timed steps, both losses and the load average when the run ended. The plot shows
the median run per mode, the range of the runs as an error bar, the floor's median as a
dashed line, and the median over runs of each mode's ratio to the floor of the same run.
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

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parent / "docs" / "images"
BENCHMARKS = {"mnist": ("mnist_cnn.py", "MNIST CNN, batch 128, SGD momentum"),
              "gpt": ("small_gpt.py", "small GPT 2x128, T=64, batch 16, AdamW")}
MODES = ("eager", "lazy", "dynamo", "floor")
LABELS = {"eager": "eager PyTorch ({})", "lazy": "torch-xla lazy",
          "dynamo": "torch-xla dynamo (openxla)", "floor": "JAX jit (floor)"}
COLORS = {"eager": "tab:gray", "lazy": "tab:blue", "dynamo": "tab:orange", "floor": "tab:green"}


def run_benchmark(script: str, steps: int, windows: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "figures.json"
        cmd = [sys.executable, str(HERE / script), "--steps", str(steps), "--windows",
               str(windows), "--json", str(path)]
        done = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True)
        lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
        print("\n".join(lines), flush=True)
        if done.returncode != 0:
            raise SystemExit(f"{script} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        return json.loads(path.read_text())


def collect(runs: int, steps: int, windows: int) -> dict:
    results = {name: [] for name in BENCHMARKS}
    for r in range(runs):
        for name, (script, _) in BENCHMARKS.items():
            print(f"run {r + 1}/{runs}: {script} (load average "
                  f"{' '.join(f'{v:.2f}' for v in os.getloadavg())})", flush=True)
            results[name].append(run_benchmark(script, steps, windows))
    return {"config": {"runs": runs, "steps_per_window": steps, "windows": windows},
            "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                        "date": time.strftime("%Y-%m-%d %H:%M %Z")},
            "results": results}


def medians(runs: list[dict]) -> dict[str, float]:
    return {mode: statistics.median(r[mode] for r in runs) for mode in MODES}


def _eager_device(data: dict) -> str:
    """Where the eager mode ran ("CPU", or "CUDA" for `--eager-device cuda` runs)."""
    runs = next(iter(data["results"].values()))
    return runs[0].get("eager_device", "cpu").upper()


def _label(mode: str, data: dict) -> str:
    return LABELS[mode].format(_eager_device(data))


def _column(runs: list[dict], key, fmt: str = "{:.1f}") -> str:
    return " / ".join(fmt.format(key(r)) for r in runs)


def markdown_table(data: dict) -> str:
    rows = [f"| workload | eager {_eager_device(data)} | lazy | dynamo | JAX floor "
            "| lazy / floor | dynamo / floor | cache hits lazy / dynamo | load average (1 min) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name, runs in data["results"].items():
        def col(key, fmt="{:.1f}", runs=runs):
            return _column(runs, key, fmt)

        hits = " / ".join(
            f"{r['lazy_cache']['hits']}/{r['lazy_cache']['lookups']}, "
            f"{r['dynamo_cache']['hits']}/{r['dynamo_cache']['lookups']}" for r in runs)
        rows.append(
            f"| {BENCHMARKS[name][1]} | {col(lambda r: r['eager'])} | {col(lambda r: r['lazy'])} "
            f"| {col(lambda r: r['dynamo'])} | {col(lambda r: r['floor'])} "
            f"| {col(lambda r: r['lazy'] / r['floor'], '{:.2f}x')} "
            f"| {col(lambda r: r['dynamo'] / r['floor'], '{:.2f}x')} | {hits} "
            f"| {col(lambda r: r['load_average'][0])} |")
    return "\n".join(rows) + "\n"


def plot(data: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(data["results"])
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4.2))
    for ax, name in zip(axes, names, strict=True):
        runs = data["results"][name]
        mid = medians(runs)
        for i, mode in enumerate(MODES):
            values = [r[mode] for r in runs]
            err = [[mid[mode] - min(values)], [max(values) - mid[mode]]]
            ax.bar(i, mid[mode], color=COLORS[mode], yerr=err, capsize=4)
            ratio = statistics.median(r[mode] / r["floor"] for r in runs)
            ax.annotate(f"{ratio:.2f}x", (i, max(values)),
                        textcoords="offset points", xytext=(0, 4), ha="center", fontsize=9)
        ax.axhline(mid["floor"], color=COLORS["floor"], linestyle="--", linewidth=1)
        ax.set_xticks(range(len(MODES)), [_label(m, data).replace(" (", "\n(") for m in MODES],
                      fontsize=8)
        ax.set_ylabel("steps/s (median of runs; bar: range)")
        cfg = data["config"]
        runs_text = f"{len(runs)} run{'s' if len(runs) > 1 else ''}"
        ax.set_title(f"{BENCHMARKS[name][1]}\n{runs_text}, each the median of "
                     f"{cfg['windows']} windows of {cfg['steps_per_window']} steps", fontsize=10)
        ax.set_ylim(0, 1.18 * max(max(r[m] for r in runs) for m in MODES))
    fig.suptitle("steps/s per mode against the JAX floor (above each bar: the median over "
                 "runs of its ratio to the floor in the same run)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="runs of each benchmark (alternating)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per window")
    p.add_argument("--windows", type=int, default=5,
                   help="timed windows per mode and run, interleaved across the modes")
    p.add_argument("--out-dir", default=str(DEFAULT_OUT), help="where modes.json/.png go")
    p.add_argument("--replot", action="store_true",
                   help="do not run anything: redraw the plot and table from OUT_DIR/modes.json")
    return p.parse_args(argv)


def main() -> None:
    args = parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        data = json.loads((out / "modes.json").read_text())
    else:
        data = collect(args.runs, args.steps, args.windows)
        (out / "modes.json").write_text(json.dumps(data, indent=1) + "\n")
    print(markdown_table(data))
    print(f"wrote {out / 'modes.json'}, {plot(data, out / 'modes.png')}")


if __name__ == "__main__":
    main()
