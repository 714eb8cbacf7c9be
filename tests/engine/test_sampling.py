import math

import pytest
import torch

from specrl.engine.sampler import SamplingParams, hash_uniform, sample_from, target_probs, token_logprobs


def test_target_probs_top_k_top_p_by_hand():
    # logits log([0.5, 0.3, 0.15, 0.05]) at T=1: top_k=3 keeps [.5,.3,.15] -> renormalised by .95;
    # then top_p=0.8: mass before token 2 is (.5+.3)/.95 = .842 >= .8 -> dropped -> [.5,.3]/.8
    logits = torch.log(torch.tensor([[[0.5, 0.3, 0.15, 0.05]]]))
    p = target_probs(logits, torch.tensor([1.0]), torch.tensor([3]), torch.tensor([0.8]))
    assert torch.allclose(p[0, 0], torch.tensor([0.625, 0.375, 0.0, 0.0]), atol=1e-6)


def test_target_probs_temperature_and_greedy():
    logits = torch.tensor([[[1.0, 2.0, 0.0]], [[1.0, 2.0, 0.0]]])
    p = target_probs(logits, torch.tensor([0.5, 0.0]), torch.tensor([-1, -1]), torch.tensor([1.0, 1.0]))
    expected = torch.softmax(torch.tensor([2.0, 4.0, 0.0]), -1)  # logits / 0.5
    assert torch.allclose(p[0, 0], expected, atol=1e-6)
    assert p[1, 0].tolist() == [0.0, 1.0, 0.0]  # temperature 0: one-hot argmax


def test_top_p_keeps_at_least_the_best_token():
    logits = torch.log(torch.tensor([[[0.9, 0.1]]]))
    p = target_probs(logits, torch.tensor([1.0]), torch.tensor([-1]), torch.tensor([0.01]))
    assert p[0, 0].tolist() == [1.0, 0.0]


def test_hash_uniform_is_deterministic_in_range_and_uniform():
    seeds = torch.arange(64)
    pos = torch.arange(500).expand(64, 500)
    u = hash_uniform(seeds, pos, 0)
    assert torch.equal(u, hash_uniform(seeds, pos, 0))
    assert not torch.equal(u, hash_uniform(seeds, pos, 1))
    assert (u > 0).all() and (u < 1).all()
    # 32,000 draws: mean 0.5 with std 1/sqrt(12 * 32000) = 0.0016; 10 bins of 3,200 +- 57
    assert abs(u.mean().item() - 0.5) < 0.01
    counts = torch.histc(u.float(), bins=10, min=0, max=1)
    assert (counts - 3200).abs().max() < 5 * math.sqrt(3200)


def test_sample_from_inverse_cdf():
    probs = torch.tensor([[0.2, 0.0, 0.8]])
    assert sample_from(probs, torch.tensor([0.1])).item() == 0
    assert sample_from(probs, torch.tensor([0.2000001])).item() == 2
    assert sample_from(probs, torch.tensor([0.9999999])).item() == 2


def test_token_logprobs_use_temperature_scaled_distribution():
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    lp = token_logprobs(logits, torch.tensor([[1]]), torch.tensor([1.0]))
    assert abs(lp.item() - math.log(0.75)) < 1e-6
    lp0 = token_logprobs(logits, torch.tensor([[1]]), torch.tensor([0.0]))  # greedy rows use T = 1
    assert abs(lp0.item() - math.log(0.75)) < 1e-6


@pytest.mark.parametrize("kw,match", [
    (dict(temperature=-0.1), "temperature=-0.1 must be >= 0"),
    (dict(top_p=0.0), r"top_p=0.0 must be in \(0, 1\]"),
    (dict(top_p=1.5), "top_p=1.5"),
    (dict(n=0), "n=0 must be >= 1"),
    (dict(max_tokens=0), "max_tokens=0 must be >= 1"),
    (dict(top_k=0), "top_k=0 must be -1"),
])
def test_bad_sampling_params(kw, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kw)


def test_per_prompt_gives_each_prompt_its_own_seed():
    from specrl.engine.sampler import per_prompt
    seeded = per_prompt(SamplingParams(temperature=0.7, max_tokens=5, seed=3), 3, start=10)
    assert [p.seed for p in seeded] == [3 * 1_000_003 + 10, 3 * 1_000_003 + 11, 3 * 1_000_003 + 12]  # n = 1
    # n = 4: seeds 4 apart, so vLLM's seed + j for sample j never repeats a seed across prompts
    seeds = [p.seed for p in per_prompt(SamplingParams(n=4, seed=3), 3)]
    assert seeds == [3 * 1_000_003, 3 * 1_000_003 + 4, 3 * 1_000_003 + 8]
    assert len({s + j for s in seeds for j in range(4)}) == 12
    assert all(p.temperature == 0.7 and p.max_tokens == 5 for p in seeded)
    assert [p.seed for p in per_prompt(SamplingParams(seed=None), 2)] == [None, None]  # unseeded stays unseeded


def _inverse_cdf(probs, u):
    """The definition sample_from must match token for token: the first token whose running mass in float64 reaches
    u x the total, never a token without mass."""
    cdf = probs.double().cumsum(-1)
    idx = (cdf < (u * cdf[..., -1]).unsqueeze(-1)).sum(-1)
    return torch.minimum(idx, (probs > 0).long().cumsum(-1).argmax(-1))


def test_sample_from_is_the_inverse_cdf_token_for_token():
    """Rows with zeros inside and at the end, rows without mass, bf16-rounded rows, u near 0 and 1, three shapes:
    a change of search (a bisection here) must not move a single token."""
    from specrl.engine.sampler import sample_from
    g = torch.Generator().manual_seed(0)
    for trial in range(300):
        shape = [(64, 500), (3, 7, 50), (1, 4096), (4, 3)][trial % 4]
        probs = torch.rand(*shape, generator=g) ** 8
        probs[probs < 0.3] = 0
        if trial % 5 == 0:
            probs[..., -2:] = 0
        if trial % 7 == 0:
            probs[0] = 0
        if trial % 13 == 0:
            probs = probs.to(torch.bfloat16).float()
        u = torch.rand(*shape[:-1], generator=g, dtype=torch.float64)
        u.view(-1)[0] = (1 - 1e-16) if trial % 2 else 1e-300
        assert torch.equal(sample_from(probs, u), _inverse_cdf(probs, u)), trial
