"""Pure-JAX reproduction of the Shardy bug that made the engine partition SPMD programs
with XLA's GSPMD (docs/design.md, "Every SPMD program is partitioned by XLA's GSPMD").

With jaxlib 0.10.2 on 4 CPU devices, the gradient of a stride-2 3x3 convolution feeding a
second 3x3 convolution, plus a residual that reads the input again and a nonlinearity
after the add, comes out exactly twice the one-device value for the first convolution's
weight (and the input gradient is wrong) when the NCHW input is split over the batch and
one spatial dim. The loss is right; GSPMD's gradients are right. In the partitioned HLO,
an all-reduce in conv2's backward sums over all four devices where it should sum over
the spatial axis only. Batch-only, spatial-only or two-spatial-dim splits are right, and
so is the same program without the nonlinearity, the residual, or with a 1x1 second
convolution.

    python integration/repro/shardy_conv_grad.py            # Shardy: MISMATCH (0.10.2)
    python integration/repro/shardy_conv_grad.py gspmd      # GSPMD: ok

Run it after upgrading jax: once Shardy prints "ok", the engine can go back to jax's
default partitioner (`lazy/manual.partitioner`). Exit status 1 on a mismatch.
"""

from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=4")

import jax  # noqa: E402  (after the device count)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402


def conv(x, w, stride):
    return lax.conv_general_dilated(x, w, (stride, stride), [(1, 1)] * 2,
                                    dimension_numbers=("NCHW", "OIHW", "NCHW"))


def loss(w1, w2, x, g):
    y = conv(conv(x, w1, 2), w2, 1) + x[:, :, ::2, ::2]  # (4, 8, 2, 2)
    return jnp.sum(jax.nn.relu(y) * g)


def main() -> int:
    jax.config.update("jax_use_shardy_partitioner", sys.argv[1:2] != ["gspmd"])
    shardy = jax.config.jax_use_shardy_partitioner
    print(f"jax {jax.__version__}, partitioner: {'Shardy' if shardy else 'GSPMD'}")
    rng = np.random.RandomState(0)
    w1 = rng.randn(8, 8, 3, 3).astype(np.float32) * 0.2
    w2 = rng.randn(8, 8, 3, 3).astype(np.float32) * 0.2
    x = rng.randn(4, 8, 4, 4).astype(np.float32)
    g = rng.randn(4, 8, 2, 2).astype(np.float32)
    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    expected = grad(*jax.device_put((w1, w2, x, g), jax.devices()[0]))
    mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("batch", "width"))
    whole = NamedSharding(mesh, P())
    split = NamedSharding(mesh, P("batch", None, "width", None))
    got = grad(jax.device_put(w1, whole), jax.device_put(w2, whole),
               jax.device_put(x, split), jax.device_put(g, whole))
    wrong = False
    for name, a, b in zip(("conv1 weight", "conv2 weight", "input"), got, expected,
                          strict=True):
        a, b = np.asarray(a), np.asarray(b)
        rel = float(np.abs(a - b).max() / np.abs(b).max())
        wrong |= rel > 1e-3
        print(f"  {name} gradient: max relative difference {rel:.1e}, "
              f"sum against one device {a.sum() / b.sum():.4f}")
    print("MISMATCH" if wrong else "ok")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
