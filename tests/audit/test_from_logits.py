"""The scorer's path from the logits (no top-k/top-p cut): the same scores as the float64 reference on the
engine's probabilities, narrow and wide nuclei, ties of bf16 logits, a token the engine cannot draw, and bets of
expectation one."""
from __future__ import annotations

import pytest
import torch

from specrl.audit.bets import (BINS, NUCLEUS, TAUS, _binned, _binned_from_histogram, bin_of, from_logits, level,
                               log_bets)
from specrl.audit.scorer import TokenScorer, logit_scores, token_scores


def _case(n: int, V: int, scale: float, seed: int, bf16: bool = False):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, V, generator=g) * scale  # [n, V]
    if bf16:
        z = z.bfloat16().float()  # few distinct values: many ties
    x = torch.multinomial(torch.softmax(z, -1), 1, generator=g)[:, 0]  # [n] sampled targets
    return z, x, torch.rand(n, dtype=torch.float64, generator=g)


@pytest.mark.parametrize("V, scale, bf16", [(44, 6.0, False), (44, 6.0, True), (3000, 12.0, False),
                                            (3000, 1.0, False), (3000, 3.0, True)])
def test_the_logit_path_matches_the_reference(V, scale, bf16):
    # scale 1 over 3000 tokens: a nucleus of ~2000 tokens; scale 12: a few
    z, x, v = _case(32, V, scale, seed=V, bf16=bf16)
    ref = token_scores(TokenScorer(1.0).probs(z), x, v)  # [n, COLUMNS] float64 on the engine's probabilities
    fast = logit_scores(z, x, v)
    assert torch.equal(torch.isfinite(fast), torch.isfinite(ref))
    fin = torch.isfinite(ref)
    assert float((fast[fin] - ref[fin]).abs().max()) < 1e-5


@pytest.mark.parametrize("scale, bf16", [(0.5, False), (4.0, False), (12.0, False), (3.0, True)])
def test_the_histogram_gives_the_token_by_token_alternatives(scale, bf16):
    # above BINS tokens from_logits reads the tempered and nucleus alternatives off p's mass by bin
    z, x, _ = _case(8, 5000, scale, seed=1, bf16=bf16)
    p = torch.softmax(z.double(), -1)
    b = bin_of((p.log() - p.log().amax(-1, keepdim=True)).clamp_min(-69.0))
    mass = torch.zeros(8, BINS, dtype=torch.float64).scatter_add_(1, b, p)
    b_x = b.gather(-1, x[:, None])[:, 0]
    assert torch.allclose(_binned_from_histogram(mass, b_x), _binned(p, b, b_x), atol=1e-12)


def test_binned_alternatives_by_hand():
    # the nucleus: the bins with less than NUCLEUS before them; tempering: by the middle of each token's bin
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64)
    b = bin_of((p.log() - p.log().max()).clamp_min(-69.0))
    got = _binned(p.expand(4, -1), b.expand(4, -1), b[0])
    order = b[0].argsort()
    before = torch.zeros(4, dtype=torch.float64)
    for i in range(4):
        before[i] = p[0][b[0] < b[0, i]].sum()
    inside = before < NUCLEUS
    assert got[:, -1].exp().tolist() == pytest.approx((inside / p[0][inside].sum()).tolist())
    for j, tau in enumerate(TAUS):
        w = p[0] * (level(b[0]) * (1 / tau - 1)).exp()
        assert got[:, j].exp().tolist() == pytest.approx((w / w.sum() / p[0]).tolist(), rel=1e-12)
    assert len(order) == 4


def test_a_token_the_engine_cannot_draw_is_impossible():
    z = torch.tensor([[0.0, -200.0, -1.0]])  # float32 softmax gives token 1 exactly 0
    s = logit_scores(z, torch.tensor([1]), torch.tensor([0.5], dtype=torch.float64))
    assert s[0, 2] == 1.0
    assert logit_scores(z, torch.tensor([2]), torch.tensor([0.5], dtype=torch.float64))[0, 2] == 0.0


@pytest.mark.parametrize("scale", [0.5, 3.0, 12.0])
def test_bets_from_logits_have_expectation_one(scale):
    z = torch.randn(1, 40, generator=torch.Generator().manual_seed(2)) * scale
    xs = torch.arange(40)
    r = from_logits(z.expand(40, -1), xs)
    p = torch.softmax(z[0].double(), -1)
    assert float(((p[:, None] * log_bets(r.log_r).exp()).sum(0) - 1).abs().max()) < 1e-6


@pytest.mark.parametrize("scale", [0.5, 3.0, 12.0])
def test_bets_from_the_histogram_have_expectation_one(scale):
    # above BINS tokens (the histogram): every target of one distribution, weighted by p, sums each bet to 1
    V = 2 * BINS
    z = torch.randn(1, V, generator=torch.Generator().manual_seed(3)) * scale
    r = from_logits(z.expand(V, -1), torch.arange(V))
    p = torch.softmax(z[0].double(), -1)
    assert float(((p[:, None] * log_bets(r.log_r).exp()).sum(0) - 1).abs().max()) < 1e-6


def test_an_exact_samplers_mean_bet_is_at_most_one():
    # 20,000 exact draws over 50 positions of a 3,000-token vocabulary: each component's mean bet is within four
    # standard errors of 1 (a false failure has probability 3e-5 a component, 1e-3 for all COMPONENTS of them)
    g = torch.Generator().manual_seed(5)
    z = torch.randn(50, 3000, generator=g) * torch.rand(50, 1, generator=g) * 6  # [50, V] flat to sharp
    z = z.repeat_interleave(400, 0)  # [20000, V]
    x = torch.multinomial(torch.softmax(z.double(), -1), 1, generator=g)[:, 0]
    bets = torch.cat([log_bets(from_logits(z[i:i + 2000], x[i:i + 2000]).log_r).exp() for i in range(0, len(x), 2000)])
    se = bets.std(0) / len(bets) ** 0.5  # [COMPONENTS]
    assert bool((bets.mean(0) <= 1 + 4 * se).all())


def test_the_scorer_takes_the_logit_path_only_without_a_cut():
    assert not TokenScorer(1.0).cuts and TokenScorer(1.0, top_p=0.9).cuts and TokenScorer(1.0, top_k=5).cuts
