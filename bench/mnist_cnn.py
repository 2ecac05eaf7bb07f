"""MNIST CNN, batch 128, SGD with momentum: eager CPU, torch-xla lazy, torch-xla under
`torch.compile(backend='openxla')`, and the same step in JAX.

    python bench/mnist_cnn.py [--steps 10] [--windows 5] [--json PATH]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch
import torch.nn.functional as F
from common import (
    Mode,
    apart,
    eager_apart,
    eager_only,
    finish,
    measure_modes,
    parse_args,
    testing_models,
    train_step,
)

MNIST = testing_models().MNIST  # torch_xla.testing.models, without importing torch_xla
BATCH, LR, MOMENTUM = 128, 0.01, 0.5


def loss_of(model, x, y):
    return F.nll_loss(model(x), y)


def torch_step(model, opt, x, y):
    return train_step(lambda a, b: loss_of(model, a, b), opt, x, y)


# --- the same step, written directly in JAX --------------------------------------------


def _conv(x, w, b):
    out = jax.lax.conv_general_dilated(
        x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW")
    )
    return out + b[None, :, None, None]


def _pool(x):
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def _bn(x, g, b):
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = x.var(axis=(0, 2, 3), keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * g[None, :, None, None] + b[None, :, None, None]


def jax_loss(p, x, y):
    x = _bn(
        jax.nn.relu(_pool(_conv(x, p["conv1.weight"], p["conv1.bias"]))),
        p["bn1.weight"],
        p["bn1.bias"],
    )
    x = _bn(
        jax.nn.relu(_pool(_conv(x, p["conv2.weight"], p["conv2.bias"]))),
        p["bn2.weight"],
        p["bn2.bias"],
    )
    x = jax.nn.relu(x.reshape(x.shape[0], -1) @ p["fc1.weight"].T + p["fc1.bias"])
    logp = jax.nn.log_softmax(x @ p["fc2.weight"].T + p["fc2.bias"])
    return -jnp.take_along_axis(logp, y[:, None], axis=1).mean()


@jax.jit
def jax_step(params, velocity, x, y):
    grads = jax.grad(jax_loss)(params, x, y)
    velocity = jax.tree.map(lambda v, g: MOMENTUM * v + g, velocity, grads)
    params = jax.tree.map(lambda p, v: p - LR * v, params, velocity)
    return params, velocity


def main() -> None:
    args = parse_args()
    torch.manual_seed(0)
    x, y = torch.randn(BATCH, 1, 28, 28), torch.randint(0, 10, (BATCH,))
    base = MNIST()
    def make_optimizer(ps):
        return torch.optim.SGD(ps, lr=LR, momentum=MOMENTUM)
    if args.eager_only:
        return eager_only(base, make_optimizer, loss_of, x, y, args)
    rates = eager_apart(__file__, args) if apart(args.eager_device) else None
    import torch_xla.core.xla_model  # noqa: F401 - before any backward: autograd sizes its device queues

    figures = measure_modes(
        "mnist_cnn b128 sgd-momentum", base,
        make_optimizer, loss_of, x, y,
        lambda: floor_mode(base, x, y), args.steps, args.windows, args.eager_device,
        rates,
    )
    finish(figures, args.json)


def floor_mode(base, x, y) -> Mode:
    params = {k: jnp.asarray(v.detach().numpy()) for k, v in base.named_parameters()}
    state = [params, jax.tree.map(jnp.zeros_like, params)]
    jx, jy = jnp.asarray(x.numpy()), jnp.asarray(y.numpy())

    def floor_step():
        state[:] = jax_step(state[0], state[1], jx, jy)

    return Mode(floor_step, lambda: jax.block_until_ready(state))


if __name__ == "__main__":
    main()
