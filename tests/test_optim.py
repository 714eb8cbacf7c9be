import math

import pytest
import torch
from torch import nn

from specrl.config import ConfigError
from specrl.optim import (OptimSettings, build_optimizer, clip_grad, clock_step, decay_groups,
                          warmup_cosine, warmup_cosine_scheduler)


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
    opt = build_optimizer(model, OptimSettings(lr=0.1, weight_decay=0.5, betas=(0.9, 0.95)))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    torch.testing.assert_close(model.proj.weight, before["proj.weight"] * 0.95)
    torch.testing.assert_close(model.proj.bias, before["proj.bias"])
    torch.testing.assert_close(model.norm.weight, before["norm.weight"])
    assert opt.param_groups[0]["betas"] == (0.9, 0.95)


def test_build_optimizer_errors():
    with pytest.raises(ConfigError, match="lr=0 is invalid"):
        build_optimizer(Tiny(), OptimSettings(lr=0))
    with pytest.raises(ConfigError, match="betas"):
        build_optimizer(Tiny(), OptimSettings(lr=1e-3, betas=(0.9, 1.0)))
    with pytest.raises(ConfigError, match="min_lr_ratio=2"):
        build_optimizer(Tiny(), OptimSettings(min_lr_ratio=2))
    with pytest.raises(ValueError, match="no trainable parameters"):
        build_optimizer(nn.Linear(2, 2).requires_grad_(False), OptimSettings(lr=1e-3))


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
    settings = OptimSettings(lr=1.0, warmup_steps=2, min_lr_ratio=0.0)
    opt = build_optimizer(model, settings)
    sched = warmup_cosine_scheduler(opt, settings, total=10)
    lrs = []
    for _ in range(3):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.5, 1.0, 1.0])
    assert [settings.lr_at(s, 10) for s in range(3)] == pytest.approx(lrs)  # the schedule the drafters follow
    with pytest.raises(ValueError, match="total=0"):
        warmup_cosine_scheduler(opt, settings, 0)


def test_default_settings_train_at_a_constant_lr():
    settings = OptimSettings(lr=0.5)  # no warmup, min_lr_ratio 1 (the online drafter's)
    assert [settings.lr_at(s, 10) for s in (0, 5, 10, 99)] == pytest.approx([0.5] * 4)


def test_clock_step_follows_steps_or_the_clock_whichever_is_further():
    assert clock_step(10, 100, elapsed_s=1.0, budget_s=100.0) == 10  # the step count leads
    assert clock_step(10, 100, elapsed_s=50.0, budget_s=100.0) == 50  # half the budget spent: half the schedule
    assert clock_step(10, 100, elapsed_s=500.0, budget_s=100.0) == 500  # past the end: warmup_cosine holds the floor


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


def test_old_drafter_keys_name_the_new_ones():
    from specrl.config import load_config
    from specrl.config.rollout import DrafterConfig
    from specrl.config.run import TrainConfig
    with pytest.raises(ConfigError, match="'rollout.drafter.lr' was replaced by 'rollout.drafter.optim.lr'"):
        load_config(TrainConfig, None, ["rollout.drafter.lr=1e-3"])
    with pytest.raises(ConfigError, match="'rollout.drafter.grad_clip' was replaced by 'rollout.drafter.optim.grad_clip'"):
        load_config(TrainConfig, None, ["rollout.drafter.grad_clip=0.5"])
    assert load_config(TrainConfig, None, ["rollout.drafter.optim.lr=1e-3"]).rollout.drafter.optim.lr == 1e-3
    # the policy keeps its flat keys: its optimizer section is these settings plus the micro-batch knobs
    assert load_config(TrainConfig, None, ["optim.lr=1e-5"]).optim.lr == 1e-5
    with pytest.raises(ConfigError, match="rollout.drafter.*warmup_steps=5.*constant"):
        load_config(TrainConfig, None, ["rollout.drafter.optim.warmup_steps=5"])


def test_old_pretrain_and_train_drafter_settings_name_the_new_ones():
    from specrl.cli.pretrain import parse_args
    from specrl.config import from_dict
    from specrl.drafters.training.data import DrafterTrainArgs
    with pytest.raises(ConfigError, match="'stages.chains.lr' was replaced by 'stages.chains.optim.lr'"):
        parse_args(["stages.chains.lr=1e-3"])
    with pytest.raises(ConfigError, match="'grad_clip' was replaced by 'stages.NAME.optim.grad_clip'"):
        parse_args(["--grad-clip", "0.5"])
    with pytest.raises(ConfigError, match="'stage' was removed: write stages.NAME.FIELD=VALUE"):
        parse_args(["--stage", "chains.optim.lr=1e-3"])
    _, cfg = parse_args(["--out", "new_policy", "stages.chains.optim.lr=1e-3"])
    assert [st.optim.lr for st in cfg.stages] == [3e-3, 1e-3, 3e-4]
    with pytest.raises(ConfigError, match="'lr' was replaced by 'optim.lr'"):
        from_dict(DrafterTrainArgs, {"lr": 1e-3})
