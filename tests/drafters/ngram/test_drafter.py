"""The n-gram drafter: the k tokens after the latest earlier match of the longest suffix (worked by hand)."""
import torch

from specrl.drafters.ngram.drafter import NgramDrafter, ngram_lookup
from specrl.engine.methods import SpecConfig
from specrl.engine.sampler import SamplingParams
from specrl.engine.sequence import Sequence


def test_longest_suffix_first():
    # suffix [1, 2, 3] (n=3) occurs at 0, followed by 9, 7; the shorter [2, 3] occurs later, at 5 (then 8, 1)
    tokens = [1, 2, 3, 9, 7, 2, 3, 8, 1, 2, 3]
    assert ngram_lookup(tokens, n_min=2, n_max=3, k=2) == [9, 7]
    assert ngram_lookup(tokens, n_min=2, n_max=2, k=2) == [8, 1]  # n=3 not tried: the latest [2, 3] wins


def test_latest_match_first():
    # suffix [5, 6] occurs at 0 (then 9, 5) and at 3 (then 7, 5): the latest one is proposed
    assert ngram_lookup([5, 6, 9, 5, 6, 7, 5, 6], n_min=2, n_max=2, k=2) == [7, 5]


def test_no_match_and_a_match_near_the_end():
    assert ngram_lookup([1, 2, 3, 4], n_min=1, n_max=3, k=4) == []  # no token repeats
    assert ngram_lookup([1, 2, 3, 4], n_min=2, n_max=3, k=4) == []
    # [2, 1] never occurred before; [1] did, at 0: what follows it runs to the end, 2 tokens of the 5 asked
    assert ngram_lookup([1, 2, 1], n_min=1, n_max=2, k=5) == [2, 1]
    assert ngram_lookup([1, 2, 1], n_min=2, n_max=2, k=5) == []  # n_min=2: the 1-token match does not count


def test_propose_pads_the_drafts_of_a_batch():
    spec = SpecConfig(method="ngram", num_speculative_tokens=3, options={"ngram": {"min": 1, "max": 2}})
    drafter = NgramDrafter(spec, torch.device("cpu"))
    seqs = [Sequence(i, i, 0, prompt, SamplingParams(), 0, 64) for i, prompt in
            enumerate(([4, 5, 6, 4, 5], [1, 2, 3], [7, 8, 7, 8]))]
    p = drafter.propose(seqs, [3, 3, 0])
    # [4, 5] -> 6, 4, 5 (3 asked); [1, 2, 3] has no match; row 2 asked for nothing
    assert p.lengths.tolist() == [3, 0, 0]
    assert p.tokens.tolist() == [[6, 4, 5], [0, 0, 0], [0, 0, 0]] and p.probs is None  # q is one-hot
