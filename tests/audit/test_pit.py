"""The PIT diagnostic: uniform under an exact sampler, calibrated p-values, two-sided power; and the choice
of audited groups from the seed alone."""
from __future__ import annotations

import torch

from specrl.audit import choose_groups
from specrl.audit.pit import pit_test, randomized_pit
from specrl.audit.scorer import token_scores


def _dists(n: int, V: int = 12, seed: int = 0) -> torch.Tensor:
    """[n, V] distributions from flat to near-deterministic (the chain task's regime)."""
    g = torch.Generator().manual_seed(seed)
    sharp = torch.rand(n, 1, generator=g) * 12  # logit scale: up to ~1e-5 mass off the mode
    return torch.softmax(torch.randn(n, V, generator=g) * sharp, -1)


def _sample(probs: torch.Tensor, seed: int) -> torch.Tensor:
    return torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(seed))[:, 0]


def _test(probs, x, seed):
    v = torch.rand(len(x), generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    s = token_scores(probs, x, v)
    return s, pit_test(s[:, 0], s[:, 1])


def test_pit_by_hand():
    # p = [0.2, 0.5, 0.3] ranks 1, 2, 0: token 2 has 0.5 before it, so u = 0.5 + v * 0.3
    u = randomized_pit(torch.tensor([0.5, 0.8]), torch.tensor([0.3, 0.2]), torch.tensor([0.5, 1.0]))
    assert torch.allclose(u, torch.tensor([0.65, 1.0 - 1e-9], dtype=torch.float64))
    s, _ = _test(torch.tensor([[0.2, 0.5, 0.3]] * 2), torch.tensor([2, 0]), 0)
    assert s[0, 0] > 0.5 and s[0, 0] < 0.8 and s[1, 0] > 0.8  # token 0 is ranked last: u in [0.8, 1]


def test_pit_is_uniform_on_exact_samples():
    probs = _dists(40_000)
    u = _test(probs, _sample(probs, 1), 1)[0][:, 0]
    counts = torch.histc(u.float(), bins=10, min=0, max=1)  # 4000 expected per bin, sd ~60
    assert (counts - 4000).abs().max() < 300
    assert abs(float(u.mean()) - 0.5) < 0.01


def test_power_is_two_sided():
    logits = torch.randn(3000, 12, generator=torch.Generator().manual_seed(7)) * 2  # [n, V]
    p = torch.softmax(logits, -1)
    hot = _sample(torch.softmax(logits / 1.3, -1), 8)  # too flat: u pushed up
    assert _test(p, hot, 8)[1].z > 5
    top = p.sort(-1, descending=True).values.cumsum(-1)  # nucleus 0.7: too sharp, u pushed down
    keep = (top - p.sort(-1, descending=True).values) < 0.7
    nucleus = torch.zeros_like(p).scatter(-1, p.argsort(-1, descending=True), keep.float()) * p
    assert _test(p, _sample(nucleus, 9), 9)[1].z < -5


def test_impossible_tokens_are_flagged():
    s, _ = _test(torch.tensor([[0.5, 0.5, 0.0]]), torch.tensor([2]), 0)
    assert s[0, 2] == 1.0 and (s[0, 3:] == 0).all()  # no bet on it: the e-process counts it apart


def test_groups_are_drawn_from_the_seed_alone():
    a, b = choose_groups(8, 3, seed=11), choose_groups(8, 3, seed=11)
    assert a == b and len(set(a)) == 3 and all(0 <= g < 8 for g in a)
    assert choose_groups(8, None, 1) == list(range(8)) and choose_groups(4, 9, 1) == [0, 1, 2, 3]
