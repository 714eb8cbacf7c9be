import math

import pytest
import torch
from torch import nn

from specrl.train.optim import build_optimizer, clip_grad, decay_groups, warmup_cosine, warmup_cosine_scheduler


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5, 4)
        self.proj = nn.Linear(4, 3)
        self.norm = nn.LayerNorm(3, bias=False)
        self.frozen = nn.Linear(3, 3)
        self.frozen.requires_grad_(False)


def test_decay_groups_skip_norms_biases_and_frozen():
    model = Tiny()
    decay, no_decay = decay_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert {id(p) for p in decay["params"]} == {id(model.embed.weight), id(model.proj.weight)}
    assert {id(p) for p in no_decay["params"]} == {id(model.proj.bias), id(model.norm.weight)}


def test_weight_decay_only_on_matrices():
    # zero gradients: Adam's step is 0, so only decoupled decay acts: p <- p * (1 - lr * wd) = p * 0.95
    model = Tiny()
    opt = build_optimizer(model, lr=0.1, weight_decay=0.5, betas=(0.9, 0.95))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    torch.testing.assert_close(model.proj.weight, before["proj.weight"] * 0.95)
    torch.testing.assert_close(model.proj.bias, before["proj.bias"])
    torch.testing.assert_close(model.norm.weight, before["norm.weight"])
    assert opt.param_groups[0]["betas"] == (0.9, 0.95)


def test_build_optimizer_errors():
    with pytest.raises(ValueError, match="lr=0"):
        build_optimizer(Tiny(), lr=0)
    with pytest.raises(ValueError, match="betas"):
        build_optimizer(Tiny(), lr=1e-3, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="no trainable parameters"):
        build_optimizer(nn.Linear(2, 2).requires_grad_(False), lr=1e-3)


def test_warmup_cosine_by_hand():
    # warmup 2, total 10: steps 0, 1 ramp to 1/2, 2/2; then cosine over the 8 remaining steps
    assert warmup_cosine(0, 2, 10) == pytest.approx(0.5)
    assert warmup_cosine(1, 2, 10) == pytest.approx(1.0)
    assert warmup_cosine(2, 2, 10) == pytest.approx(1.0)  # progress 0
    # step 6: progress 4 / 8 = 0.5, cos(pi / 2) = 0: 0.5 with min 0; 0.1 + 0.9 * 0.5 = 0.55 with min 0.1
    assert warmup_cosine(6, 2, 10) == pytest.approx(0.5)
    assert warmup_cosine(6, 2, 10, min_ratio=0.1) == pytest.approx(0.55)
    # the end and beyond stay at min_ratio
    assert warmup_cosine(10, 2, 10, 0.1) == pytest.approx(0.1)
    assert warmup_cosine(50, 2, 10, 0.1) == pytest.approx(0.1)
    # no warmup: full LR at step 0
    assert warmup_cosine(0, 0, 10) == pytest.approx(1.0)


def test_scheduler_drives_optimizer_lr():
    model = nn.Linear(2, 2)
    opt = build_optimizer(model, lr=1.0)
    sched = warmup_cosine_scheduler(opt, warmup=2, total=10)
    lrs = []
    for _ in range(3):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.5, 1.0, 1.0])
    with pytest.raises(ValueError, match="min_ratio=2"):
        warmup_cosine_scheduler(opt, 0, 10, min_ratio=2)


def test_clip_grad():
    # gradient [3, 4]: norm 5; clipped to norm 1 -> [0.6, 0.8]
    model = nn.Linear(2, 1, bias=False)
    model.weight.grad = torch.tensor([[3.0, 4.0]])
    assert clip_grad(model, None) == pytest.approx(5.0)  # measure only
    torch.testing.assert_close(model.weight.grad, torch.tensor([[3.0, 4.0]]))
    assert clip_grad(model, 1.0) == pytest.approx(5.0)  # returns the norm before clipping
    torch.testing.assert_close(model.weight.grad, torch.tensor([[0.6, 0.8]]))


def test_clip_grad_without_grads_and_with_nan():
    model = nn.Linear(2, 1)
    assert clip_grad(model, 1.0) == 0.0
    model.weight.grad = torch.tensor([[math.nan, 1.0]])
    assert math.isnan(clip_grad(model, 1.0))
