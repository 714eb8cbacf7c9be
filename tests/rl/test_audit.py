"""The sampler audit's statistic: exact under an exact sampler (uniform PIT, calibrated p-values, also on
near-deterministic distributions), two-sided power on wrong samplers, and the windowed alarm."""
from __future__ import annotations

import torch

from specrl.rl.audit import ALARM_Z, SamplerAlarm, choose_groups, randomized_pit, step_test, token_scores


def _dists(n: int, V: int = 12, seed: int = 0) -> torch.Tensor:
    """[n, V] distributions from flat to near-deterministic (the chain task's regime)."""
    g = torch.Generator().manual_seed(seed)
    sharp = torch.rand(n, 1, generator=g) * 12  # logit scale: up to ~1e-5 mass off the mode
    return torch.softmax(torch.randn(n, V, generator=g) * sharp, -1)


def _sample(probs: torch.Tensor, seed: int) -> torch.Tensor:
    return torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(seed))[:, 0]


def _scores(probs, x, seed):
    v = torch.rand(len(x), generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    return token_scores(probs, x, v)


def test_pit_by_hand():
    # p = [0.2, 0.5, 0.3] ranks 1, 2, 0: token 2 has 0.5 before it, so u = 0.5 + v * 0.3
    p = torch.tensor([[0.2, 0.5, 0.3]] * 2)
    u = randomized_pit(p, torch.tensor([2, 0]), torch.tensor([0.5, 1.0]))
    assert torch.allclose(u, torch.tensor([0.65, 1.0 - 1e-9], dtype=torch.float64))


def test_pit_is_uniform_on_exact_samples():
    probs = _dists(40_000)
    u = _scores(probs, _sample(probs, 1), 1)[:, 0]
    counts = torch.histc(u.float(), bins=10, min=0, max=1)  # 4000 expected per bin, sd ~60
    assert (counts - 4000).abs().max() < 300
    assert abs(float(u.mean()) - 0.5) < 0.01


def test_p_value_is_calibrated():
    # 1500 steps of 100 tokens each from an exact sampler: P(p < a) ~ a
    probs = _dists(150_000, seed=3)
    scores = _scores(probs, _sample(probs, 4), 4).view(1500, 100, 3)
    p = torch.tensor([step_test(s).p_value for s in scores])
    assert abs(float((p < 0.05).float().mean()) - 0.05) < 0.02
    assert float((p < 0.01).float().mean()) < 0.025
    z = torch.tensor([step_test(s).z for s in scores])
    assert abs(float(z.mean())) < 0.1 and abs(float(z.std()) - 1) < 0.08


def test_a_rare_token_at_a_sharp_position_does_not_dominate():
    # log p = -8 at a position whose mode has 0.9997: weight 3e-4, so its z of ~+3.4 barely moves Z
    p = torch.full((1, 10), 3e-4 / 9)
    p[0, 0] = 1 - 3e-4
    flat = torch.full((200, 10), 0.1)
    probs, x = torch.cat([p, flat]), torch.cat([torch.tensor([5]), _sample(flat, 5)])
    scores = _scores(probs, x, 6)
    assert scores[0, 0] > 0.9997 and abs(step_test(scores).z - step_test(scores[1:]).z) < 0.05


def test_power_is_two_sided():
    logits = torch.randn(3000, 12, generator=torch.Generator().manual_seed(7)) * 2  # [n, V]
    p = torch.softmax(logits, -1)
    hot = _sample(torch.softmax(logits / 1.3, -1), 8)  # too flat: u pushed up
    assert step_test(_scores(p, hot, 8)).z > 5
    top = p.sort(-1, descending=True).values.cumsum(-1)  # nucleus 0.7: too sharp, u pushed down
    keep = (top - p.sort(-1, descending=True).values) < 0.7
    nucleus = torch.zeros_like(p).scatter(-1, p.argsort(-1, descending=True), keep.float()) * p
    assert step_test(_scores(p, _sample(nucleus, 9), 9)).z < -5


def test_impossible_tokens_are_counted():
    p = torch.tensor([[0.5, 0.5, 0.0]])
    t = step_test(_scores(p, torch.tensor([2]), 0))
    assert t.impossible == 1 and t.z > 5


def test_alarm_combines_the_window():
    alarm = SamplerAlarm(window=4)
    assert not alarm.update(3.0, 1.0)  # one step at 3.0 < 3.29
    assert alarm.update(2.0, 1.0)  # (3 + 2) / sqrt(2) = 3.54
    alarm.reset()
    for _ in range(10):
        assert not alarm.update(1.5, 1.0)  # 4 x 1.5 / 2 = 3.0: under ALARM_Z
    assert not alarm.update(-9.0, 0.0)  # no weight: no evidence
    assert alarm.update(-2.0, 1.0) is False and abs(alarm.evidence() - 2.5 / 2) < 1e-9
    assert ALARM_Z > 3.29


def test_groups_are_drawn_from_the_seed_alone():
    a, b = choose_groups(8, 3, seed=11), choose_groups(8, 3, seed=11)
    assert a == b and len(set(a)) == 3 and all(0 <= g < 8 for g in a)
    assert choose_groups(8, None, 1) == list(range(8)) and choose_groups(4, 9, 1) == [0, 1, 2, 3]
