"""`torch_xla.core.functions`: differentiable collectives.

One process (world of one): the forward is the reduction of a single replica
and the backward is PyTorch/XLA's local rule, checked against eager autograd of
the same formula. Two processes: forward and backward against eager values.
"""

from __future__ import annotations

import pathlib
import pickle

import pytest
import torch
from conftest import run_python

import torch_xla
import torch_xla.core.functions as xf
import torch_xla.core.xla_model as xm

TESTS = pathlib.Path(__file__).parent


@pytest.fixture(scope="module")
def device():
    return torch_xla.device()


def _grad_through(fn, value: torch.Tensor, device) -> tuple[torch.Tensor, torch.Tensor]:
    x = value.clone().to(device).requires_grad_()
    out = fn(x)
    (out * torch.arange(1.0, out.numel() + 1).reshape(out.shape).to(device)).sum().backward()
    return out.cpu(), x.grad.cpu()


VALUE = torch.tensor([[1.0, -2.0, 0.0], [3.0, 0.5, -1.5]])
WEIGHTS = torch.arange(1.0, 7.0).reshape(2, 3)


@pytest.mark.parametrize(
    "reduce_type, scale, expected_grad",
    [
        (xm.REDUCE_SUM, 1.0, WEIGHTS),
        (xm.REDUCE_SUM, 0.5, WEIGHTS * 0.5),
        # mul: grad * scale * (output / input), 0 where the input is 0
        (xm.REDUCE_MUL, 2.0, WEIGHTS * 2.0 * torch.where(VALUE != 0, torch.tensor(2.0), 0.0)),
        (xm.REDUCE_MAX, 1.0, WEIGHTS),
        (xm.REDUCE_MIN, 1.0, WEIGHTS),
    ],
)
def test_all_reduce_forward_and_backward(device, reduce_type, scale, expected_grad):
    out, grad = _grad_through(lambda x: xf.all_reduce(reduce_type, x, scale=scale), VALUE, device)
    torch.testing.assert_close(out, VALUE * scale)
    torch.testing.assert_close(grad, expected_grad)


def test_all_reduce_and_has_no_gradient(device):
    x = torch.ones(3, device=device, requires_grad=True)
    out = xf.all_reduce(xm.REDUCE_AND, x)
    with pytest.raises(RuntimeError, match="all_reduce\\('and'\\) has no gradient"):
        out.sum().backward()


def test_all_gather_of_one_replica_is_the_value(device):
    out, grad = _grad_through(lambda x: xf.all_gather(x, dim=1), VALUE, device)
    torch.testing.assert_close(out, VALUE)
    torch.testing.assert_close(grad, WEIGHTS)


def test_distributed_mm_of_one_replica_is_matmul(device):
    w, x = torch.randn(4, 3), torch.randn(3, 6)
    for split in (1, 2, 3):
        torch.testing.assert_close(xf.distributed_mm(w.to(device), x.to(device), split).cpu(),
                                   w @ x, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="split=4 does not divide"):
        xf.distributed_mm(w.to(device), x.to(device), split=4)
    with pytest.raises(ValueError, match="x has 5 rows"):
        xf.distributed_mm(w.to(device), torch.randn(5, 6).to(device))


BN_BATCH = torch.linspace(-2, 3, 4 * 3 * 5 * 2).reshape(4, 3, 5, 2) ** 2  # N=4, C=3
BN_WEIGHTS = torch.linspace(-1, 1, BN_BATCH.numel()).reshape(BN_BATCH.shape)


def _batch_norm_step(module: torch.nn.Module, batch: torch.Tensor, weights: torch.Tensor,
                     device) -> dict:
    """Two training steps' outputs, the gradients of `(out * weights).sum()` (input,
    weight, bias), the running statistics, and the output in eval mode."""
    module = module.to(device)
    with torch.no_grad():
        module.weight.copy_(torch.tensor([0.5, 2.0, -1.0]))
        module.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
    x = batch.clone().to(device).requires_grad_()
    out = module(x)
    (out * weights.to(device)).sum().backward()
    module(x.detach() * 2)
    module.eval()
    return {"out": out.detach().cpu(), "grad": x.grad.cpu(), "weight": module.weight.grad.cpu(),
            "bias": module.bias.grad.cpu(), "running_mean": module.running_mean.cpu(),
            "running_var": module.running_var.cpu(), "eval": module(x.detach()).detach().cpu()}


def test_sync_batch_norm_of_one_replica_is_batch_norm(device):
    found = _batch_norm_step(xf.SyncBatchNorm(3), BN_BATCH, BN_WEIGHTS, device)
    expected = _batch_norm_step(torch.nn.BatchNorm2d(3), BN_BATCH, BN_WEIGHTS, "cpu")
    for key, value in expected.items():
        torch.testing.assert_close(found[key], value, rtol=1e-4, atol=1e-4, msg=key)
    flat = _batch_norm_step(xf.SyncBatchNorm(3), BN_BATCH[:, :, 0, 0], BN_WEIGHTS[:, :, 0, 0],
                            device)
    torch.testing.assert_close(flat["out"], torch.nn.functional.batch_norm(
        BN_BATCH[:, :, 0, 0], None, None, torch.tensor([0.5, 2.0, -1.0]),
        torch.tensor([0.1, -0.2, 0.3]), training=True), rtol=1e-4, atol=1e-4)
    assert repr(xf.SyncBatchNorm(3)) == "SyncBatchNorm(3, eps=1e-05, momentum=0.1)"
    with pytest.raises(ValueError, match=r"3 channels in dimension 1, got shape \[4, 2\]"):
        xf.SyncBatchNorm(3).to(device)(torch.zeros(4, 2, device=device))


def functions_worker(index: int) -> dict:
    """One replica of a two-process job: each collective's output and input gradient."""
    import torch_xla.runtime as xr

    dev = torch_xla.device()
    ordinal = xr.global_ordinal()
    value = VALUE + ordinal
    results = {"ordinal": ordinal}
    for name, fn in {
        "sum": lambda x: xf.all_reduce(xm.REDUCE_SUM, x, scale=0.5),
        "max": lambda x: xf.all_reduce(xm.REDUCE_MAX, x),
        "gather": lambda x: xf.all_gather(x, dim=0),
    }.items():
        results[name] = _grad_through(fn, value, dev)
    torch.manual_seed(0)
    w_full = torch.randn(5, 6)  # replica r holds columns 3r..3r+2
    x = torch.randn(6, 4) + ordinal  # each replica multiplies its own x by the whole w
    shard = w_full[:, ordinal * 3:(ordinal + 1) * 3]
    results["mm"] = xf.distributed_mm(shard.to(dev), x.to(dev), split=2).cpu()
    results["mm_expected"] = w_full @ x
    half = slice(ordinal * 2, ordinal * 2 + 2)  # this replica's half of the global batch
    results["bn"] = _batch_norm_step(xf.SyncBatchNorm(3), BN_BATCH[half], BN_WEIGHTS[half], dev)
    return results


def test_two_replicas_match_eager(tmp_path):
    out = tmp_path / "results.pkl"
    result = run_python(
        f"""
        import pickle, sys
        sys.path.insert(0, {str(TESTS)!r})
        import torch_xla.distributed.xla_multiprocessing as xmp
        import test_core_functions as t
        with open({str(out)!r}, "wb") as f:
            pickle.dump(xmp.spawn(t.functions_worker), f)
        """,
        env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2"},
        timeout=300,
    )
    assert out.exists(), result.stderr[-3000:]
    with open(out, "rb") as f:
        results = pickle.load(f)
    by_ordinal = {r["ordinal"]: r for r in results.values()}
    assert sorted(by_ordinal) == [0, 1]
    values = [VALUE, VALUE + 1]
    for ordinal, r in by_ordinal.items():
        out_sum, grad_sum = r["sum"]
        torch.testing.assert_close(out_sum, (values[0] + values[1]) * 0.5)
        torch.testing.assert_close(grad_sum, WEIGHTS * 0.5)
        out_max, grad_max = r["max"]
        torch.testing.assert_close(out_max, torch.maximum(values[0], values[1]))
        torch.testing.assert_close(grad_max, torch.where(values[ordinal] == out_max, WEIGHTS, 0.0))
        out_gather, grad_gather = r["gather"]
        torch.testing.assert_close(out_gather, torch.cat(values))
        weights = torch.arange(1.0, 13.0).reshape(4, 3)
        torch.testing.assert_close(grad_gather, weights[ordinal * 2:(ordinal + 1) * 2])
        torch.testing.assert_close(r["mm"], r["mm_expected"], rtol=1e-4, atol=1e-4)
    # SyncBatchNorm over two halves is BatchNorm over the whole batch; each replica's
    # parameter gradients are its share (DDP sums them).
    whole = _batch_norm_step(torch.nn.BatchNorm2d(3), BN_BATCH, BN_WEIGHTS, "cpu")
    halves = [by_ordinal[k]["bn"] for k in (0, 1)]
    for key in ("out", "grad", "eval"):
        torch.testing.assert_close(torch.cat([h[key] for h in halves]), whole[key],
                                   rtol=1e-4, atol=1e-4, msg=key)
    for key in ("weight", "bias"):
        torch.testing.assert_close(halves[0][key] + halves[1][key], whole[key],
                                   rtol=1e-4, atol=1e-4, msg=key)
    for key in ("running_mean", "running_var"):
        for h in halves:
            torch.testing.assert_close(h[key], whole[key], rtol=1e-4, atol=1e-4, msg=key)


def _reference_nms(boxes, scores, score_threshold, iou_threshold, output_size):
    """Greedy NMS over Python numbers: visit by decreasing score until `output_size` kept."""
    def iou(a, b):
        ay0, ay1 = sorted((a[0], a[2]))
        ax0, ax1 = sorted((a[1], a[3]))
        by0, by1 = sorted((b[0], b[2]))
        bx0, bx1 = sorted((b[1], b[3]))
        inter = max(min(ay1, by1) - max(ay0, by0), 0) * max(min(ax1, bx1) - max(ax0, bx0), 0)
        union = (ay1 - ay0) * (ax1 - ax0) + (by1 - by0) * (bx1 - bx0) - inter
        return inter / union if union else float("nan")

    kept = []
    for i in sorted(range(len(scores)), key=lambda i: -scores[i]):
        if len(kept) == output_size:
            break
        if all(not iou(boxes[i], boxes[k]) > iou_threshold for k in kept):
            kept.append(i)
    return [i for i in kept if scores[i] > score_threshold]


@pytest.mark.parametrize(
    "seed, n, score_threshold, iou_threshold, output_size",
    [(0, 12, 0.2, 0.3, 5), (1, 20, 0.0, 0.5, 20), (2, 16, 0.6, 0.1, 8), (3, 10, 0.9, 0.7, 0)],
)
def test_nms_matches_greedy_reference(device, seed, n, score_threshold, iou_threshold, output_size):
    torch.manual_seed(seed)
    boxes, scores = torch.rand(n, 4), torch.rand(n)
    expected = _reference_nms(boxes.tolist(), scores.tolist(), score_threshold, iou_threshold,
                              output_size)
    indices, num_valid = xf.nms(boxes.to(device), scores.to(device),
                                torch.tensor(score_threshold).to(device),
                                torch.tensor(iou_threshold).to(device), output_size)
    assert indices.dtype == torch.int32 and indices.shape == (output_size,)
    assert int(num_valid) == len(expected)
    assert indices.cpu()[: len(expected)].tolist() == expected


def test_nms_checks_its_shapes(device):
    with pytest.raises(ValueError, match="output_size=5 must be in \\[0, 4\\]"):
        xf.nms(torch.rand(4, 4), torch.rand(4), 0.0, 0.5, 5)
    with pytest.raises(ValueError, match="boxes must be \\[N, 4\\]"):
        xf.nms(torch.rand(4, 3), torch.rand(4), 0.0, 0.5, 2)
