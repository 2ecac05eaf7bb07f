"""Small models the engine tests train on both the xla device and eager CPU."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from torch_xla.testing.models import MNIST  # noqa: F401 - re-exported for the tests


class TinyTransformer(nn.Module):
    """Token embedding, two pre-norm encoder layers, a vocabulary head."""

    def __init__(self, vocab: int = 50, d: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(16, d) * 0.02)
        layer = nn.TransformerEncoderLayer(
            d, heads, dim_feedforward=2 * d, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        return self.head(self.blocks(x))


def mnist_batch(n: int = 8):
    return torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,))


def token_batch(n: int = 4, t: int = 16, vocab: int = 50):
    tokens = torch.randint(0, vocab, (n, t + 1))
    return tokens[:, :-1], tokens[:, 1:]


def mnist_loss(model, x, y):
    return F.nll_loss(model(x), y)


def lm_loss(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
