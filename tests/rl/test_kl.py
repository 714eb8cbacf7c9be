import math

import pytest
import torch

from specrl.rl import KL_ESTIMATORS, kl_penalty, truncated_importance_ratio

LN2 = math.log(2)


def test_estimators_by_hand():
    # pi(x) = 1, pi_ref(x) = 0.5: log ratio log(pi / ref) = ln 2 = 0.6931
    logp, ref = torch.tensor([[0.0]]), torch.tensor([[-LN2]])
    # k1 = ln 2
    torch.testing.assert_close(kl_penalty("k1", logp, ref), torch.tensor([[LN2]]))
    # k2 = 0.5 * (ln 2)^2 = 0.2402
    torch.testing.assert_close(kl_penalty("k2", logp, ref), torch.tensor([[0.5 * LN2**2]]))
    # k3 = exp(-ln 2) - (-ln 2) - 1 = 0.5 + 0.6931 - 1 = 0.1931
    torch.testing.assert_close(kl_penalty("k3", logp, ref), torch.tensor([[0.5 + LN2 - 1]]))


def test_equal_policies_give_zero():
    x = torch.log_softmax(torch.randn(2, 5), -1)
    for name in KL_ESTIMATORS.names:
        torch.testing.assert_close(kl_penalty(name, x, x), torch.zeros(2, 5))


def test_k1_and_k3_are_unbiased_for_kl():
    # sample tokens from p, evaluate log p and log q of the samples; the means approach KL(p || q)
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.3, 0.5])
    true_kl = (p * (p / q).log()).sum()  # 0.5 ln 2.5 + 0.2 ln 0.4 = 0.2749
    x = torch.multinomial(p, 200_000, replacement=True, generator=g)  # [S]
    logp, logq = p.log()[x], q.log()[x]
    for name in ("k1", "k3"):
        torch.testing.assert_close(kl_penalty(name, logp, logq).mean(), true_kl, atol=0.01, rtol=0)
    assert (kl_penalty("k3", logp, logq) >= 0).all()


def test_k3_is_finite_for_extreme_ratios():
    out = kl_penalty("k3", torch.tensor([-200.0, 0.0]), torch.tensor([0.0, -200.0]))
    assert torch.isfinite(out).all() and (out >= 0).all()


def test_kl_errors():
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'; valid names: k1, k2, k3"):
        kl_penalty("k4", torch.zeros(1), torch.zeros(1))
    with pytest.raises(ValueError, match="must match"):
        kl_penalty("k3", torch.zeros(2), torch.zeros(3))


def test_truncated_importance_ratio():
    # pi_old / pi_gen: exp(0 - (-1)) = e = 2.718, truncated to cap 2;
    # exp(-1 - 0) = 0.3679 kept; equal logprobs give 1
    old = torch.tensor([[0.0, -1.0, -3.0]], requires_grad=True)
    gen = torch.tensor([[-1.0, 0.0, -3.0]])
    w = truncated_importance_ratio(old, gen, cap=2.0)
    torch.testing.assert_close(w, torch.tensor([[2.0, 1 / math.e, 1.0]]))
    assert not w.requires_grad
    with pytest.raises(ValueError, match="cap=0"):
        truncated_importance_ratio(old, gen, cap=0)
