"""The bets: expectation exactly 1 under the sampler's own distribution (worked by hand, and on near one-hot
and nucleus-cut distributions), calibration of the e-process on simulated exact samplers, and power against
simulated faults."""
from __future__ import annotations

import math

import pytest
import torch

from specrl.audit.bets import COMPONENTS, LAMBDAS, NUCLEUS, TAIL, WIDTH, log_bets, log_mixture, log_ratios


def _all_targets(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every token of p's support as a target: ([k, V] copies of p, [k] targets)."""
    xs = torch.arange(len(p))[p > 0]
    return p[None].expand(len(xs), -1), xs


def test_tail_bet_by_hand():
    # p = [0.5, 0.25, 0.25]: q = 0.9 p + 0.1 / 3, so r(0) = 0.9 + 0.1 / 1.5 = 0.9667, r(1) = 0.9 + 0.1 / 0.75
    p = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    r = log_ratios(*_all_targets(p))[:, -1].exp()
    assert r.tolist() == pytest.approx([0.9 + TAIL / 1.5, 0.9 + TAIL / 0.75, 0.9 + TAIL / 0.75], abs=1e-12)
    # lam = 0.5 on token 1: b = 0.5 + 0.5 * 1.0333 = 1.01667
    assert float(log_bets(log_ratios(*_all_targets(p)))[1, -2].exp()) == pytest.approx(0.5 + 0.5 * (0.9 + TAIL / 0.75))


def test_nucleus_bet_by_hand():
    # p = [0.6, 0.35, 0.05]: mass before is 0, 0.6, 0.95; the 0.9 nucleus is {0, 1} of mass 0.95, so
    # r = 1 / 0.95 on tokens 0 and 1 and 0 on token 2 (the bet of lam = 0.9 there is 0.1)
    p = torch.tensor([0.6, 0.35, 0.05], dtype=torch.float64)
    logs = log_ratios(*_all_targets(p))
    assert logs[:, -2].exp().tolist() == pytest.approx([1 / 0.95, 1 / 0.95, 0.0])
    assert float(log_bets(logs)[2, len(LAMBDAS) * 6 + 3].exp()) == pytest.approx(1 - 0.9)
    assert NUCLEUS == 0.9


def test_tempered_bet_by_hand():
    # tau = 0.8 (a = 1.25) on p = [0.8, 0.2]: log p - log max p = [0, -1.386], bins 0 and 20 (of WIDTH), tempered
    # by their middles: q = p * exp(0.25 * [-0.5, -20.5] WIDTH) / its sum, within a bin's tempering of p^1.25
    p = torch.tensor([0.8, 0.2], dtype=torch.float64)
    w = p * (0.25 * torch.tensor([-0.5, -20.5], dtype=torch.float64) * WIDTH).exp()
    got = log_ratios(*_all_targets(p))[:, 0].exp()
    assert got.tolist() == pytest.approx((w / w.sum() / p).tolist(), abs=1e-12)
    exact = p ** 1.25 / (p ** 1.25).sum() / p
    assert float((got.log() - exact.log()).abs().max()) < 0.25 * WIDTH


@pytest.mark.parametrize("p", [
    [0.2, 0.5, 0.3],
    [1 - 1e-9, 5e-10, 5e-10, 0.0],  # near one-hot, a token outside the support
    [0.45, 0.45, 0.1],  # a tie at the nucleus edge
    [0.5, 0.3, 0.0, 0.0, 0.2],  # cut by top-p/top-k: zeros inside the vocabulary
    [1.0, 0.0, 0.0],  # one-hot: every bet is 1
])
def test_every_bet_has_expectation_one(p):
    p = torch.tensor(p, dtype=torch.float64)
    probs, xs = _all_targets(p)
    bets = log_bets(log_ratios(probs, xs)).exp()  # [k, COMPONENTS]
    assert bets.shape[1] == COMPONENTS and bool((bets >= 0).all())
    assert ((p[xs, None] * bets).sum(0) - 1).abs().max() < 1e-14


def test_expectation_one_on_random_sharp_and_flat_distributions():
    g = torch.Generator().manual_seed(0)
    for scale in (0.5, 3.0, 12.0):
        p = torch.softmax(torch.randn(40, dtype=torch.float64, generator=g) * scale, 0)
        probs, xs = _all_targets(p)
        assert ((p[xs, None] * log_bets(log_ratios(probs, xs)).exp()).sum(0) - 1).abs().max() < 1e-13


# simulation: positions from flat to near-deterministic (the chain task's regime)
def _positions(n: int, seed: int, V: int = 16) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    sharp = torch.rand(n, 1, generator=g, dtype=torch.float64) * 12  # logit scale: up to ~1e-5 off the mode
    return torch.randn(n, V, generator=g, dtype=torch.float64) * sharp  # [n, V] logits


def _draw(probs: torch.Tensor, seed: int) -> torch.Tensor:
    return torch.multinomial(probs.float(), 1, generator=torch.Generator().manual_seed(seed))[:, 0]


def _running_log_e(p: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """[n] the e-process after each token of x ~ ? under the claimed p."""
    return log_mixture(log_bets(log_ratios(p, x)).cumsum(0))


def test_exact_sampler_crosses_one_over_alpha_at_most_alpha_of_the_time():
    # 200 runs of 2,000 tokens from an exact sampler at alpha = 0.05: Ville allows 10 crossings in expectation;
    # the mixture spends its wealth slowly, so fewer cross (the bound is not tight). Binomial(200, 0.05)
    # exceeds 22 with probability < 3e-3.
    runs, n, alpha = 200, 2000, 0.05
    logits = _positions(runs * n, seed=1)
    p = torch.softmax(logits, -1)
    x = _draw(p, 2)
    log_e = log_mixture(log_bets(log_ratios(p, x)).view(runs, n, COMPONENTS).cumsum(1))  # [runs, n]
    crossed = int((log_e.amax(1) >= math.log(1 / alpha)).sum())
    assert crossed <= 22


@pytest.mark.parametrize("fault", ["T=1.1", "T=0.9", "top_p=0.9"])
def test_faults_are_caught(fault):
    # 4,000 tokens (about what 2 audited groups give in one or two steps) reach 1/alpha = 1000
    logits = _positions(4000, seed=3) / 3  # a policy of moderate sharpness
    p = torch.softmax(logits, -1)
    if fault.startswith("T="):
        sampled = torch.softmax(logits / float(fault[2:]), -1)
    else:
        from specrl.engine.sampler import target_probs
        sampled = target_probs(logits[None].float(), torch.ones(1), torch.tensor([-1]), torch.tensor([0.9]))[0]
    x = _draw(sampled.double(), 4)
    assert float(_running_log_e(p, x).amax()) >= math.log(1000)
