"""The adaptive strategy: its k policy, the switch-off above the batch threshold, acceptance feedback, and
greedy exactness through the engine."""
import json

import pytest
import torch

from specrl import SpecConfig
from specrl.drafters.auto import AutoDrafter, acceptance_k, batch_k, build
from specrl.drafters.suffix.drafter import SuffixDrafter
from specrl.engine.drafting import TargetForward, pad_proposals
from tests.drafters.suffix.test_drafter import assert_greedy_matches_sd_off, make_seq, sd_off  # noqa: F401 (fixture)
from tests.helpers import tiny_model


def auto_spec(**kw):
    return SpecConfig(**{"method": "auto", "num_speculative_tokens": 8, "ngram_min": 1, "auto_max_batch": 32, **kw})


class FullDrafter:
    """Inner drafter that always drafts the k it is given (token 5)."""
    hidden_layers = ()
    device = "cpu"

    def __init__(self):
        self.observed = 0

    def observe(self, fwd):
        self.observed += 1

    def propose(self, seqs, k):
        return pad_proposals([[5] * ki for ki in k], "cpu")

    def release(self, seq):
        pass


def verified(seqs, valid):
    B = len(seqs)
    z = torch.zeros(B, 1, dtype=torch.long)
    return TargetForward(seqs, z, z, torch.tensor(valid), (), torch.zeros(B, 1, 1))


def test_batch_k_shrinks_with_the_batch_and_is_off_above_the_threshold():
    # k = clamp(2 * 32 // n - 1, 1, 8): n=1 -> 63 -> 8; n=8 -> 7; n=12 -> 64 // 12 - 1 = 4; n=16 -> 3;
    # n=32 -> 1; n=33 -> 0 (TLT: SD off above 32)
    assert [batch_k(n, 8, 32) for n in (1, 7, 8, 12, 16, 32, 33, 512)] == [8, 8, 7, 4, 3, 1, 0, 0]


def test_acceptance_k_caps_at_the_expected_accepted_run():
    # rate a -> ceil(a / (1 - a)) + 1: 0 -> 1, 0.5 -> 2, 0.75 -> 4, 0.9 -> 10 (capped at k = 8)
    assert [acceptance_k(a, 8) for a in (0.0, 0.5, 0.75, 0.9, 1.0)] == [1, 2, 4, 8, 8]
    assert acceptance_k(None, 8) == 8 and acceptance_k(0.0, 0) == 0


def test_proposals_are_empty_above_the_threshold():
    spec = auto_spec(auto_max_batch=2)
    auto = AutoDrafter(spec, SuffixDrafter(spec, "cpu"))
    seqs = [make_seq(i, slot=i, output=[10, 11, 10, 11, 10]) for i in range(3)]
    auto.observe(verified(seqs, [1, 1, 1]))
    prop = auto.propose(seqs, [8, 8, 8])  # 3 running > 2: off
    assert prop.tokens.shape == (3, 0) and prop.lengths.tolist() == [0, 0, 0] and auto.last_k == 0
    prop = auto.propose(seqs[:2], [8, 8])  # 2 running: on, k = 2 * 2 // 2 - 1 = 1
    assert auto.last_k == 1 and prop.lengths.tolist() == [1, 1] and prop.tokens[:, 0].tolist() == [11, 11]


def test_inner_drafter_observes_every_forward_even_when_off():
    inner = FullDrafter()
    auto = AutoDrafter(auto_spec(auto_max_batch=1), inner)
    seqs = [make_seq(i, slot=i) for i in range(2)]
    auto.propose(seqs, [8, 8])
    auto.observe(verified(seqs, [1, 1]))
    assert inner.observed == 1 and auto.acceptance_rate is None  # nothing drafted, nothing measured


def test_poor_acceptance_lowers_k_and_good_acceptance_restores_it():
    auto = AutoDrafter(auto_spec(), FullDrafter())
    seqs = [make_seq(0, slot=0)]
    assert auto.propose(seqs, [8]).lengths.tolist() == [8]
    auto.observe(verified(seqs, [1]))  # 0 of 8 accepted: rate 0 -> k 1
    assert auto.acceptance_rate == 0.0 and auto.propose(seqs, [8]).lengths.tolist() == [1]
    ks = []
    for _ in range(12):  # from now on every draft is accepted: valid = drafts + 1
        n = auto.last_k
        auto.observe(verified(seqs, [n + 1]))
        ks.append(auto.propose(seqs, [8]).lengths.item())
    # decayed sums (0.8) forget the 8 rejected drafts within a few steps: k climbs back to 8, never falls
    assert ks == sorted(ks) and ks[-1] == 8 and auto.acceptance_rate > 0.9


def test_prefill_forwards_are_not_counted_as_verification():
    auto = AutoDrafter(auto_spec(), FullDrafter())
    a, b = make_seq(0, slot=0), make_seq(1, slot=1)
    auto.propose([a], [4])
    auto.observe(verified([b], [7]))  # a prefill of another sequence arrives between propose and verify
    assert auto.acceptance_rate is None


def test_unknown_inner_method_is_rejected():
    with pytest.raises(ValueError, match="auto_methods"):
        build(auto_spec(auto_methods=("auto",)), tiny_model(), 4, 32)


@pytest.mark.parametrize("rows", [[0], [2], list(range(7))])
def test_greedy_matches_sd_off(sd_off, rows, tmp_path):  # noqa: F811
    # threshold 3 with 4 slots: batch 7 starts with SD off (4 running) and speculates in its tail
    trace = tmp_path / "trace.jsonl"
    llm = assert_greedy_matches_sd_off(sd_off, "auto", rows, trace_path=str(trace), auto_max_batch=3)
    assert llm.drafter.inner.store.pools
    steps = [json.loads(line) for line in trace.read_text().splitlines()]
    spec_steps = [r for r in steps if r["phase"] == "spec"]
    assert all(r["draft_tokens"] == 0 for r in spec_steps if r["active"] > 3)
    assert any(r["draft_tokens"] > 0 for r in spec_steps if r["active"] <= 3)
    if len(rows) == 7:
        assert any(r["active"] > 3 for r in spec_steps)
