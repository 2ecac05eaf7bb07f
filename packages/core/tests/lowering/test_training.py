"""A CNN and a small transformer training step: every ATen op they reach, eager or after
functionalization (what the engine sees), is lowered and matches eager."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functionalize
from torch.fx.experimental.proxy_tensor import make_fx

from .harness import LoweringChecker


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, groups=2)
        self.pool = nn.MaxPool2d(2)
        self.avg = nn.AvgPool2d(2, ceil_mode=True)
        self.head = nn.Linear(8, 10)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.conv1(x))))
        x = F.gelu(self.conv2(x))
        x = F.adaptive_avg_pool2d(self.avg(x), 1).flatten(1)
        return self.head(self.dropout(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab=50, width=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.layer = nn.TransformerEncoderLayer(width, 2, 32, batch_first=True, dropout=0.0)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids):
        causal = nn.Transformer.generate_square_subsequent_mask(ids.shape[1])
        return self.head(self.norm(self.layer(self.embed(ids), src_mask=causal,
                                              is_causal=True)))


def _batch():
    torch.manual_seed(0)
    return torch.randn(2, 3, 16, 16), torch.tensor([1, 7]), torch.randint(0, 50, (2, 5))


def _loss(cnn, tf, x, y, ids):
    logits = tf(ids)
    return F.cross_entropy(cnn(x), y) + F.cross_entropy(logits.flatten(0, 1), ids.flatten())


def _assert_clean(checker: LoweringChecker):
    problems = sorted({f"{o.op}: {o.status}: {o.detail[:300]}" for o in checker.failures()})
    assert not problems, "\n".join(problems)
    assert checker.summary()["native"] > 0


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw", "adam_fused"])
def test_eager_training_step(optimizer):
    cnn, tf = SmallCNN(), TinyTransformer()
    params = list(cnn.parameters()) + list(tf.parameters())
    opt = {
        "sgd": lambda: torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True),
        "adam": lambda: torch.optim.Adam(params, foreach=True),
        "adamw": lambda: torch.optim.AdamW(params, foreach=True, amsgrad=True),
        "adam_fused": lambda: torch.optim.Adam(params, fused=True),
    }[optimizer]()
    x, y, ids = _batch()
    checker = LoweringChecker()
    with checker:
        for _ in range(2):
            _loss(cnn, tf, x, y, ids).backward()
            opt.step()
            opt.zero_grad()
    _assert_clean(checker)


def test_functionalized_training_step():
    """Run the graph the engine would record: functional ops, *_copy views, scatters."""
    cnn, tf = SmallCNN(), TinyTransformer()
    cnn.eval()  # dropout/batch-norm in eval, training below exercises the functional BN
    names = [n for n, _ in cnn.named_parameters()] + [n for n, _ in tf.named_parameters()]
    params = [p.detach() for p in list(cnn.parameters()) + list(tf.parameters())]

    def step(params, x, y, ids):
        def loss_fn(flat):
            n_cnn = len(list(cnn.parameters()))
            cnn_params = dict(zip(names[:n_cnn], flat[:n_cnn], strict=False))
            tf_params = dict(zip(names[n_cnn:], flat[n_cnn:], strict=False))
            out_cnn = torch.func.functional_call(cnn, cnn_params, (x,))
            out_tf = torch.func.functional_call(tf, tf_params, (ids,))
            return F.cross_entropy(out_cnn, y) + F.cross_entropy(out_tf.flatten(0, 1),
                                                                 ids.flatten())

        grads = torch.func.grad(loss_fn)(params)
        new = [p.clone() for p in params]
        torch._foreach_add_(new, grads, alpha=-0.1)
        new[0][0].mul_(0.5)  # a write through a view becomes select_scatter
        return new

    x, y, ids = _batch()
    graph = make_fx(functionalize(step, remove="mutations_and_views"))(params, x, y, ids)
    seen = {str(n.target) for n in graph.graph.nodes if n.op == "call_function"}
    assert any("_copy" in op or "scatter" in op for op in seen), seen
    checker = LoweringChecker()
    with checker:
        graph(params, x, y, ids)
    _assert_clean(checker)


def test_functional_batch_norm_training():
    bn = nn.BatchNorm2d(4)

    def step(x, mean, var):
        return F.batch_norm(x, mean, var, bn.weight.detach(), bn.bias.detach(), training=True)

    x = torch.randn(3, 4, 5, 5)
    graph = make_fx(functionalize(step, remove="mutations_and_views"))(
        x, torch.zeros(4), torch.ones(4))
    checker = LoweringChecker()
    with checker:
        graph(x, torch.zeros(4), torch.ones(4))
    _assert_clean(checker)


def test_grad_scaler_step():
    cnn = SmallCNN()
    opt = torch.optim.SGD(cnn.parameters(), lr=0.1, foreach=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1)
    x, y, _ = _batch()
    checker = LoweringChecker()
    with checker:
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(cnn(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    _assert_clean(checker)
    seen = {o.op for o in checker.outcomes}
    assert "aten._amp_update_scale.default" in seen
