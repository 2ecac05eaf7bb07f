"""Backward passes on any xla device, whatever ran first in the process (fresh processes)."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from .helpers import run_python

TRAIN = """
    import json, sys, torch
    {before_import}
    import torch_xla
    import torch_xla.core.xla_model as xm

    def train(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            xm.mark_step()
        grads = [p.grad.device.type + ":" + str(p.grad.device.index) for p in model.parameters()]
        return [p.detach().cpu().tolist() for p in model.parameters()], grads

    result = {{name: train(device) for name, device in
              [("cpu", "cpu")] + [(f"xla:{{i}}", xm.xla_device(i)) for i in range(4)]}}
    print(json.dumps(result))
"""


def trained(before_import: str = "") -> dict:
    out = run_python(
        TRAIN.format(before_import=before_import),
        env={"CPU_NUM_DEVICES": "4", "PJRT_DEVICE": "CPU"},
    )
    return json.loads(out.strip().splitlines()[-1])


def assert_like_cpu(result: dict) -> None:
    expected, _ = result["cpu"]
    for i in range(4):
        params, grad_devices = result[f"xla:{i}"]
        assert grad_devices == [f"xla:{i}"] * 4
        for actual, wanted in zip(params, expected, strict=True):
            torch.testing.assert_close(torch.tensor(actual), torch.tensor(wanted))


def test_every_device_of_a_process_trains_like_the_cpu():
    assert_like_cpu(trained())


def test_backward_before_importing_torch_xla():
    """The autograd engine sizes its device queues at the first backward of the process."""
    first_backward = """
    w = torch.ones(3, requires_grad=True)
    (w * 2).sum().backward()
    """
    assert_like_cpu(trained(first_backward))


def test_checkpointed_backward_and_autograd_grad(device):
    """Re-entrant backward passes (checkpointing) and `autograd.grad` on the calling thread."""
    results = {}
    for where in ("cpu", device):
        torch.manual_seed(0)
        layer = torch.nn.Linear(4, 4).to(where)
        x = torch.randn(2, 4).to(where).requires_grad_()
        for reentrant in (True, False):
            layer.zero_grad()
            x.grad = None
            checkpoint(layer, x, use_reentrant=reentrant).tanh().sum().backward()
            results[str(where), reentrant] = (layer.weight.grad.cpu(), x.grad.cpu())
        (grad,) = torch.autograd.grad((layer.weight**2).sum(), layer.weight)
        results[str(where), "grad"] = (grad.cpu(),)
    for key in [("cpu", True), ("cpu", False), ("cpu", "grad")]:
        for actual, expected in zip(results[str(device), key[1]], results[key], strict=True):
            torch.testing.assert_close(actual, expected)


def test_cross_entropy_takes_float_class_targets_as_pytorch_xla_does(device):
    """PyTorch/XLA's nll_loss reads a floating target as class indices (CPU PyTorch
    refuses it); the loss and gradient equal CPU PyTorch's with the indices as int64."""
    torch.manual_seed(0)
    logits = torch.randn(6, 5, requires_grad=True)
    target = torch.tensor([0.0, 4.0, 2.0, 1.0, 3.0, 2.0])
    with pytest.raises(RuntimeError, match="Long"):
        torch.nn.functional.cross_entropy(logits, target)
    expected = torch.nn.functional.cross_entropy(logits, target.long())
    expected.backward()
    xla_logits = logits.detach().to(device).requires_grad_()
    loss = torch.nn.functional.cross_entropy(xla_logits, target.to(device))
    loss.backward()
    torch.testing.assert_close(loss.cpu(), expected.detach())
    torch.testing.assert_close(xla_logits.grad.cpu(), logits.grad)


@pytest.mark.parametrize("mode,weighted,padding_idx", [
    ("sum", False, None), ("mean", False, None), ("sum", True, None), ("mean", False, 4),
])
def test_sparse_embedding_bag_gives_the_dense_gradient_as_pytorch_xla_does(
        device, mode, weighted, padding_idx):
    """XLA tensors are dense: PyTorch/XLA answers `sparse=True` with the dense gradient,
    equal to the CPU's sparse one made dense (before, the sync raised). Tolerance: float32
    defaults (rtol 1.3e-6, atol 1e-5)."""
    torch.manual_seed(0)
    weight = torch.randn(10, 3, requires_grad=True)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 4])
    offsets = torch.tensor([0, 4, 4, 7])  # the third bag is empty
    psw = torch.randn(9) if weighted else None

    def bags(w, move):
        return torch.nn.functional.embedding_bag(
            move(indices), w, move(offsets), mode=mode, sparse=True,
            per_sample_weights=None if psw is None else move(psw), padding_idx=padding_idx)

    expected = bags(weight, lambda t: t)
    (expected * torch.arange(1.0, 4.0)).sum().backward()
    assert weight.grad.layout == torch.sparse_coo
    xla_weight = weight.detach().to(device).requires_grad_()
    out = bags(xla_weight, lambda t: t.to(device))
    (out * torch.arange(1.0, 4.0, device=device)).sum().backward()
    assert xla_weight.grad.layout == torch.strided and xla_weight.grad.device == device
    torch.testing.assert_close(out.cpu(), expected.detach())
    torch.testing.assert_close(xla_weight.grad.cpu(), weight.grad.to_dense())


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("rows", [None, 3])
def test_multilabel_margin_loss_ignores_the_labels_after_the_first_minus_one(device, reduction,
                                                                            rows):
    """torch's decomposition of the loss (which the device uses) counted them, and gave a
    1-D input's unreduced loss the shape (1,)."""
    torch.manual_seed(0)
    target = torch.tensor([[1, -1, 0, 3], [2, 0, -1, 2], [0, 1, 2, 3]])
    x = torch.randn(3, 4, requires_grad=True)
    if rows is None:
        target, x = target[1], torch.randn(4, requires_grad=True)
    expected = torch.nn.functional.multilabel_margin_loss(x, target, reduction=reduction)
    expected.sum().backward()
    xla_x = x.detach().to(device).requires_grad_()
    loss = torch.nn.functional.multilabel_margin_loss(xla_x, target.to(device),
                                                      reduction=reduction)
    loss.sum().backward()
    torch.testing.assert_close(loss.cpu(), expected.detach())
    torch.testing.assert_close(xla_x.grad.cpu(), x.grad)


FAILING_BACKWARD = """
    import json, torch
    import torch_xla
    from torch.utils.checkpoint import checkpoint
    from torch_xla.lazy import tensor

    device = torch_xla.device()
    dispatch = tensor._dispatcher
    failing = {}  # op -> the exception it raises when dispatched

    def faulty(func, args, kwargs):
        if func in failing:
            raise failing[func]
        return dispatch(func, args, kwargs)

    tensor.set_dispatcher(faulty)
    aten = torch.ops.aten
    w = torch.randn(4, 3).to(device).requires_grad_()
    x = torch.randn(2, 4).to(device)
    seen = {}

    def attempt(name, op, error, backward):
        failing.clear()
        if op is not None:
            failing[op] = error
        try:
            backward()
            seen[name] = "no error"
        except BaseException as caught:
            seen[name] = [type(caught).__name__, str(caught), caught is error]
        failing.clear()

    loss = lambda: torch.relu(x @ w).sum()
    attempt("relu backward", aten.threshold_backward.default, ValueError("bad relu"),
            lambda: loss().backward())
    attempt("matmul backward", aten.mm.default, RuntimeError("bad mm"),
            lambda: loss().backward())
    attempt("autograd.grad", aten.threshold_backward.default, TypeError("bad grad"),
            lambda: torch.autograd.grad(loss(), w))
    attempt("checkpoint", aten.threshold_backward.default, ValueError("bad recompute"),
            lambda: checkpoint(lambda v: torch.relu(v @ w), x.clone().requires_grad_(),
                               use_reentrant=True).sum().backward())
    attempt("interrupt", aten.threshold_backward.default, KeyboardInterrupt(),
            lambda: loss().backward())
    def hooked(kind, error):
        def hook(*_):
            raise error
        v = w.detach().clone().requires_grad_()
        if kind == "tensor":
            out = x @ v
            out.register_hook(hook)
        elif kind == "accumulated":
            v.register_post_accumulate_grad_hook(hook)
            out = x @ v
        else:
            layer = torch.nn.Linear(4, 3).to(device)
            layer.register_full_backward_hook(hook)
            out = layer(x)
        return lambda: out.sum().backward()

    for kind in ("tensor", "accumulated", "module"):
        error = ZeroDivisionError(kind)
        attempt(kind + " hook", None, error, hooked(kind, error))
    try:
        torch.nn.Embedding(5, 3, sparse=True).to(device)(
            torch.tensor([0, 3]).to(device)).sum().backward()
    except NotImplementedError as caught:
        seen["sparse embedding"] = str(caught)
    w.grad = None
    loss().backward()  # the process goes on training
    seen["grad after"] = w.grad.cpu().tolist()
    on_cpu = w.detach().cpu().requires_grad_()
    torch.relu(x.cpu() @ on_cpu).sum().backward()
    seen["grad expected"] = on_cpu.grad.tolist()
    print(json.dumps(seen))
"""


def test_an_error_in_a_backward_pass_raises_itself():
    """An XLA op or a hook raising in a backward pass aborted the process ("terminate
    called without an active exception"): torch's engine called our Python device guard
    with the error pending. The exception itself now reaches the caller, and training
    goes on."""
    seen = json.loads(run_python(FAILING_BACKWARD).strip().splitlines()[-1])
    assert seen["relu backward"] == ["ValueError", "bad relu", True]
    assert seen["matmul backward"] == ["RuntimeError", "bad mm", True]
    assert seen["autograd.grad"] == ["TypeError", "bad grad", True]
    assert seen["checkpoint"][:2] == ["ValueError", "bad recompute"]
    assert seen["interrupt"] == ["KeyboardInterrupt", "", True]
    for kind in ("tensor", "accumulated", "module"):
        assert seen[kind + " hook"] == ["ZeroDivisionError", kind, True]
    assert "XLA tensors are dense" in seen["sparse embedding"]
    assert "sparse=False" in seen["sparse embedding"]
    torch.testing.assert_close(torch.tensor(seen["grad after"]),
                               torch.tensor(seen["grad expected"]))
