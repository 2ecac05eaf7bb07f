"""Small GPT (2 layers, d=128, 4 heads, T=64, batch 16), AdamW: eager CPU, torch-xla lazy,
torch-xla under `torch.compile(backend='openxla')`, and the same step in JAX.

    python bench/small_gpt.py [--steps 10] [--windows 5] [--json PATH]
"""

from __future__ import annotations

import math

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
    train_step,
)
from torch import nn

VOCAB, D, HEADS, T, BATCH, LAYERS = 256, 128, 4, 64, 16, 2
LR, BETAS, EPS, WD = 3e-4, (0.9, 0.999), 1e-8, 0.01


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (z.view(b, t, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D // HEADS)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, D)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def loss_of(model, x, y):
    return F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))


def torch_step(model, opt, x, y):
    return train_step(lambda a, b: loss_of(model, a, b), opt, x, y)


# --- the same step, written directly in JAX --------------------------------------------


def _ln(x, p, name):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * p[f"{name}.weight"] + p[f"{name}.bias"]


def _lin(x, p, name, bias=True):
    y = x @ p[f"{name}.weight"].T
    return y + p[f"{name}.bias"] if bias else y


def jax_loss(p, idx, targets):
    b, t = idx.shape
    x = p["tok.weight"][idx] + p["pos.weight"][jnp.arange(t)]
    mask = jnp.tril(jnp.ones((t, t), bool))
    for i in range(LAYERS):
        n = f"blocks.{i}"
        qkv = _lin(_ln(x, p, f"{n}.ln1"), p, f"{n}.qkv")
        q, k, v = (
            z.reshape(b, t, HEADS, D // HEADS).transpose(0, 2, 1, 3) for z in jnp.split(qkv, 3, -1)
        )
        att = jnp.where(mask, q @ k.transpose(0, 1, 3, 2) / math.sqrt(D // HEADS), -jnp.inf)
        y = (jax.nn.softmax(att, -1) @ v).transpose(0, 2, 1, 3).reshape(b, t, D)
        x = x + _lin(y, p, f"{n}.proj")
        h = jax.nn.gelu(_lin(_ln(x, p, f"{n}.ln2"), p, f"{n}.fc"), approximate=False)
        x = x + _lin(h, p, f"{n}.out")
    logits = _lin(_ln(x, p, "ln"), p, "head", bias=False)
    logp = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(logp, targets[..., None], axis=-1).mean()


@jax.jit
def jax_step(params, m, v, step, idx, targets):
    grads = jax.grad(jax_loss)(params, idx, targets)
    step = step + 1
    m = jax.tree.map(lambda m, g: BETAS[0] * m + (1 - BETAS[0]) * g, m, grads)
    v = jax.tree.map(lambda v, g: BETAS[1] * v + (1 - BETAS[1]) * g * g, v, grads)
    c1, c2 = 1 - BETAS[0] ** step, 1 - BETAS[1] ** step

    def update(p, m, v):
        p = p * (1 - LR * WD)
        return p - LR / c1 * m / (jnp.sqrt(v / c2) + EPS)

    return jax.tree.map(update, params, m, v), m, v, step


def seeded_batch_and_model() -> tuple:
    """(inputs, targets, model): the batch and the initial GPT every mode starts from."""
    torch.manual_seed(0)
    tokens = torch.randint(0, VOCAB, (BATCH, T + 1))
    return tokens[:, :-1], tokens[:, 1:], GPT()


def main() -> None:
    args = parse_args()
    x, y, base = seeded_batch_and_model()
    def make_optimizer(ps):
        return torch.optim.AdamW(ps, lr=LR, weight_decay=WD)
    if args.eager_only:
        return eager_only(base, make_optimizer, loss_of, x, y, args)
    rates = eager_apart(__file__, args) if apart(args.eager_device) else None
    import torch_xla.core.xla_model  # noqa: F401 - before any backward: autograd sizes its device queues

    figures = measure_modes(
        "small_gpt 2x128 T64 b16 adamw", base,
        make_optimizer, loss_of, x, y,
        lambda: floor_mode(base, x, y), args.steps, args.windows, args.eager_device,
        rates,
    )
    finish(figures, args.json)


def floor_mode(base, x, y) -> Mode:
    params = {k: jnp.asarray(p.detach().numpy()) for k, p in base.named_parameters()}
    zeros = jax.tree.map(jnp.zeros_like, params)
    state = [params, zeros, zeros, jnp.zeros((), jnp.float32)]
    jx, jy = jnp.asarray(x.numpy()), jnp.asarray(y.numpy())

    def floor_step():
        state[:] = jax_step(*state, jx, jy)

    return Mode(floor_step, lambda: jax.block_until_ready(state))


if __name__ == "__main__":
    main()
