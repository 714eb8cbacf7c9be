"""The scorer's path from the logits (no top-k/top-p cut): the same scores as the float64 reference on the
engine's probabilities, narrow and wide nuclei, ties of bf16 logits, a token the engine cannot draw, and bets of
expectation one."""
from __future__ import annotations

import pytest
import torch

from specrl.audit.bets import from_logits, log_bets, nucleus_size
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


@pytest.mark.parametrize("V", [44, 1024, 5000])  # up to BINS tokens: a sort; above: the histogram
@pytest.mark.parametrize("scale, bf16", [(0.5, False), (4.0, False), (12.0, False), (3.0, True)])
def test_nuclei_are_counted_exactly(V, scale, bf16):
    z, _, _ = _case(8, V, scale, seed=1, bf16=bf16)
    e = (z - z.amax(-1, keepdim=True)).exp()
    s = e.double().sum(-1)
    sizes, mass = nucleus_size(e, s)
    p = e.double() / s[:, None]
    top = p.sort(-1, descending=True).values
    cut = (top.cumsum(-1) - top) < 0.9
    assert sizes.tolist() == cut.sum(-1).tolist()
    assert mass.tolist() == pytest.approx((top * cut).sum(-1).tolist(), abs=1e-9)


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


def test_the_scorer_takes_the_logit_path_only_without_a_cut():
    assert not TokenScorer(1.0).cuts and TokenScorer(1.0, top_p=0.9).cuts and TokenScorer(1.0, top_k=5).cuts
