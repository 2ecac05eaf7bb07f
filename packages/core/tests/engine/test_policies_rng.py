"""A plugin's rng_algorithm() picks the bit generator of every random op in the graph.

Each algorithm runs in a fresh process under a CPU plugin subclass registered by
hand; XLA dumps the HLO it was given (before its own passes expand the
generator), so the algorithm is read off the `rng-bit-generator` instructions.
"""

from __future__ import annotations

import json
import re

import pytest

from .helpers import run_python

PROGRAM = """
import json
import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla.plugins import register_plugin
from torch_xla_cpu import CpuPlugin


class RngCpu(CpuPlugin):
    def rng_algorithm(self):
        return {algorithm!r}


register_plugin("rngcpu", RngCpu())
xr.set_device_type("rngcpu")
device = xm.xla_device()


def draw(seed):
    torch.manual_seed(seed)
    values = {{
        "normal": torch.randn(20000, device=device),
        "uniform": torch.rand(20000, device=device),
        "randint": torch.randint(0, 10, (20000,), device=device),
        "dropout": F.dropout(torch.ones(20000).to(device), p=0.25, training=True),
    }}
    return {{k: v.cpu() for k, v in values.items()}}


a, b, c = draw(1), draw(1), draw(2)
n, u, r, d = a["normal"], a["uniform"], a["randint"], a["dropout"]
print(json.dumps({{
    "same_seed_equal": all(torch.equal(a[k], b[k]) for k in a),
    "other_seed_differs": all(not torch.equal(a[k], c[k]) for k in a),
    "normal": [n.mean().item(), n.std().item()],
    "uniform": [u.min().item(), u.max().item(), u.mean().item()],
    "randint": [r.min().item(), r.max().item(), torch.bincount(r).tolist()],
    "dropout": [sorted(set(d.unique().tolist())), (d > 0).float().mean().item()],
    "first": n[:4].tolist(),
}}))
"""

ALGORITHMS = ("default", "threefry", "philox")


def run(tmp_path, algorithm: str) -> tuple[dict, set[str]]:
    dump = tmp_path / algorithm
    out = run_python(PROGRAM.format(algorithm=algorithm),
                     {"XLA_FLAGS": f"--xla_dump_to={dump}"})
    hlo = "".join(p.read_text() for p in dump.glob("*graph_fn*.before_optimizations.txt"))
    generators = set(re.findall(r"rng-bit-generator\(.*?algorithm=(\w+)", hlo))
    return json.loads(out.strip().splitlines()[-1]), generators


@pytest.fixture(scope="module")
def draws(tmp_path_factory):
    root = tmp_path_factory.mktemp("rng")
    return {algorithm: run(root, algorithm) for algorithm in ALGORITHMS}


@pytest.mark.parametrize(("algorithm", "hlo_name"), [
    ("default", "rng_default"), ("threefry", "rng_three_fry"), ("philox", "rng_philox")])
def test_the_graph_uses_the_chosen_generator(draws, algorithm, hlo_name):
    _, generators = draws[algorithm]
    assert generators == {hlo_name}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_seeds_reproduce(draws, algorithm):
    values, _ = draws[algorithm]
    assert values["same_seed_equal"] and values["other_seed_differs"]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_distributions_are_sane(draws, algorithm):
    values, _ = draws[algorithm]
    mean, std = values["normal"]
    assert abs(mean) < 0.03 and abs(std - 1) < 0.03  # 20000 draws: 4 standard errors
    low, high, average = values["uniform"]
    assert 0 <= low and high < 1 and abs(average - 0.5) < 0.01
    smallest, largest, counts = values["randint"]
    assert (smallest, largest) == (0, 9) and all(1800 < c < 2200 for c in counts)
    kept_values, kept = values["dropout"]
    assert kept_values == [0.0, pytest.approx(4 / 3)] and abs(kept - 0.75) < 0.015


def test_threefry_and_philox_give_different_streams(draws):
    assert draws["threefry"][0]["first"] != draws["philox"][0]["first"]
