"""`_foreach_*` functional overloads (what optimizers with foreach=True reach after
functionalization) against their in-place eager twins."""

import pytest
import torch

from .harness import check_op

aten = torch.ops.aten


def _lists(n=3):
    torch.manual_seed(0)
    return ([torch.rand(4, 3) + 0.5 for _ in range(n)], [torch.rand(5) + 0.5
                                                          for _ in range(n)])


def _pair():
    a = [torch.rand(4, 3) + 0.5, torch.rand(7) + 0.5]
    b = [torch.rand(4, 3) + 0.5, torch.rand(7) + 0.5]
    c = [torch.rand(4, 3) + 0.5, torch.rand(7) + 0.5]
    return a, b, c


CASES = {
    "add.List": (aten._foreach_add.List, lambda a, b, c: ((a, b), {"alpha": -0.5})),
    "add.Scalar": (aten._foreach_add.Scalar, lambda a, b, c: ((a, 2.0), {})),
    "add.ScalarList": (aten._foreach_add.ScalarList, lambda a, b, c: ((a, [1.0, -2]), {})),
    "add.Tensor": (aten._foreach_add.Tensor, lambda a, b, c: ((a, torch.tensor(3.0)), {})),
    "sub.List": (aten._foreach_sub.List, lambda a, b, c: ((a, b), {})),
    "mul.Scalar": (aten._foreach_mul.Scalar, lambda a, b, c: ((a, 0.9), {})),
    "mul.List": (aten._foreach_mul.List, lambda a, b, c: ((a, b), {})),
    "mul.Tensor": (aten._foreach_mul.Tensor, lambda a, b, c: ((a, torch.tensor(0.1)), {})),
    "div.List": (aten._foreach_div.List, lambda a, b, c: ((a, b), {})),
    "div.ScalarList": (aten._foreach_div.ScalarList, lambda a, b, c: ((a, [2.0, 3.0]), {})),
    "addcmul.Scalar": (aten._foreach_addcmul.Scalar, lambda a, b, c: ((a, b, c, 0.5), {})),
    "addcdiv.ScalarList": (aten._foreach_addcdiv.ScalarList,
                           lambda a, b, c: ((a, b, c, [0.1, -0.2]), {})),
    "addcdiv.Tensor": (aten._foreach_addcdiv.Tensor,
                       lambda a, b, c: ((a, b, c, torch.tensor([0.1, -0.2])), {})),
    "lerp.Scalar": (aten._foreach_lerp.Scalar, lambda a, b, c: ((a, b, 0.1), {})),
    "lerp.List": (aten._foreach_lerp.List, lambda a, b, c: ((a, b, c), {})),
    "sqrt": (aten._foreach_sqrt.default, lambda a, b, c: ((a,), {})),
    "neg": (aten._foreach_neg.default, lambda a, b, c: ((a,), {})),
    "reciprocal": (aten._foreach_reciprocal.default, lambda a, b, c: ((a,), {})),
    "maximum.List": (aten._foreach_maximum.List, lambda a, b, c: ((a, b), {})),
    "clamp_min.Scalar": (aten._foreach_clamp_min.Scalar, lambda a, b, c: ((a, 0.8), {})),
    "pow.Scalar": (aten._foreach_pow.Scalar, lambda a, b, c: ((a, 2.0), {})),
    "pow.ScalarAndTensor": (aten._foreach_pow.ScalarAndTensor, lambda a, b, c: ((2.0, a), {})),
    "norm": (aten._foreach_norm.Scalar, lambda a, b, c: ((a,), {})),
    "copy": (aten._foreach_copy.default, lambda a, b, c: ((a, b), {})),
    "zero": (aten._foreach_zero.default, lambda a, b, c: ((a,), {})),
    "max": (aten._foreach_max.default, lambda a, b, c: ((a,), {})),
}


@pytest.mark.parametrize("name", CASES)
def test_foreach(name):
    op, make = CASES[name]
    args, kwargs = make(*_pair())
    check_op(op, args, kwargs)


def _optimizer_state(n=2):
    torch.manual_seed(0)
    make = [lambda: torch.randn(4, 3), lambda: torch.randn(5)]
    params = [make[i % 2]() for i in range(n)]
    grads = [torch.randn_like(p) for p in params]
    avgs = [torch.randn_like(p) * 0.1 for p in params]
    sqs = [torch.rand_like(p) * 0.1 for p in params]
    maxes = [s + 0.05 for s in sqs]
    steps = [torch.tensor(3.0) for _ in params]
    return params, grads, avgs, sqs, maxes, steps


@pytest.mark.parametrize("op", [aten._fused_adam.default, aten._fused_adamw.default])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("scaled", [False, True])
def test_fused_adam(op, amsgrad, scaled):
    kwargs = dict(lr=0.01, beta1=0.9, beta2=0.999, weight_decay=0.1, eps=1e-8,
                  amsgrad=amsgrad, maximize=False)
    if scaled:
        kwargs.update(grad_scale=torch.tensor(4.0), found_inf=torch.tensor(0.0))
    params, grads, avgs, sqs, maxes, steps = _optimizer_state()
    check_op(op, (params, grads, avgs, sqs, maxes if amsgrad else [], steps), kwargs)


def test_fused_adam_skips_step_on_inf():
    kwargs = dict(lr=0.01, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8,
                  amsgrad=False, maximize=True, grad_scale=torch.tensor(2.0),
                  found_inf=torch.tensor(1.0))
    params, grads, avgs, sqs, _, steps = _optimizer_state()
    check_op(aten._fused_adam.default, (params, grads, avgs, sqs, [], steps), kwargs)


@pytest.mark.parametrize("nesterov,first", [(False, False), (True, False), (False, True)])
def test_fused_sgd(nesterov, first):
    params, grads, bufs, *_ = _optimizer_state()
    check_op(aten._fused_sgd.default, (params, grads, bufs),
             dict(weight_decay=0.01, momentum=0.9, lr=0.1, dampening=0.0, nesterov=nesterov,
                  maximize=False, is_first_step=first))


@pytest.mark.parametrize("op", [aten._fused_adagrad.default, aten._fused_adagrad.tensor_lr])
@pytest.mark.parametrize("found_inf", [None, 0.0, 1.0])
def test_fused_adagrad(op, found_inf):
    params, grads, _, sums, _, steps = _optimizer_state()
    lr = 0.1 if op is aten._fused_adagrad.default else torch.tensor(0.1)
    kwargs = dict(lr=lr, lr_decay=0.01, weight_decay=0.1, eps=1e-10, maximize=True)
    if found_inf is not None:
        kwargs.update(grad_scale=torch.tensor(4.0), found_inf=torch.tensor(found_inf))
    check_op(op, (params, grads, sums, steps), kwargs)


@pytest.mark.parametrize("poison", [None, float("inf"), float("nan")])
def test_amp_unscale(poison):
    grads = [torch.randn(3, 2), torch.randn(4)]
    if poison is not None:
        grads[1][2] = poison
    check_op(aten._amp_foreach_non_finite_check_and_unscale.default,
             (grads, torch.zeros(1), torch.tensor([0.25])))


@pytest.mark.parametrize("found_inf,tracker", [(0.0, 0), (0.0, 1), (1.0, 1)])
def test_amp_update_scale(found_inf, tracker):
    check_op(aten._amp_update_scale.default,
             (torch.tensor([1024.0]), torch.tensor([tracker], dtype=torch.int32),
              torch.tensor([found_inf]), 2.0, 0.5, 2))
