import numpy as np
import pytest

from specrl.sim.acceptance import BatchAcceptance, geometric
from specrl.sim.des import Engine, SDSetting, lockstep, simulate_replica, slot_starts, traced_drafts
from tests.sim.helpers import toy_hw


def _free_roofline(**ov):
    """A machine whose roofline is ~0, so each iteration costs exactly its overheads."""
    return toy_hw(bw=1e30, flops=1e30, **ov)


def test_all_tokens_generated_with_and_without_sd(tiny):
    lengths = np.random.default_rng(0).integers(1, 300, 40)
    engine = Engine(toy_hw(bw=1e8, flops=1e9, iter_s=1e-3), tiny)
    for sd in (None, SDSetting(geometric(0.6, 4), 0.05)):
        tr = simulate_replica(engine, lengths, 16, 8, sd, np.random.default_rng(1))
        assert tr.emitted.sum() == pytest.approx(lengths.sum())
        assert tr.active.max() <= 8  # never more than the batch slots
        assert (tr.active > 0).all()  # continuous batching never idles while work is queued


def test_full_acceptance_speedup_matches_formula(tiny):
    # 1 s per iteration, drafting 0.5 s per SD step. No SD: L = 101 iterations (prefill emits the
    # first token). SD with every draft accepted: 1 + ceil(100 / 5) = 21 iterations, 20 of them SD.
    engine = Engine(_free_roofline(iter_s=1.0, spec_iter_s=0.0, draft_iter_s=0.5), tiny)
    lengths = np.full(4, 101)
    plain = simulate_replica(engine, lengths, 8, 4, None, np.random.default_rng(0)).time_s
    sd = SDSetting(geometric(1.0, 4), 0.0)
    spec = simulate_replica(engine, lengths, 8, 4, sd, np.random.default_rng(0)).time_s
    assert plain == pytest.approx(101.0, rel=1e-9)
    assert spec == pytest.approx(21 + 20 * 0.5, rel=1e-9)  # the prefill-only step drafts nothing
    assert plain / spec == pytest.approx(101 / 31)


def test_slot_schedule_fifo():
    # 2 slots, iterations [3, 1, 2, 2]: seq2 takes the slot freed at 1, seq3 the one freed at 3
    np.testing.assert_array_equal(slot_starts(np.array([3, 1, 2, 2]), 2), [0, 0, 1, 3])
    np.testing.assert_array_equal(slot_starts(np.array([5, 5]), 4), [0, 0])


def test_long_tail_emerges_from_lengths(tiny):
    # one sequence 10x longer than the rest: most of the replica's iterations run nearly empty
    lengths = np.array([50] * 15 + [500])
    tr = simulate_replica(Engine(_free_roofline(iter_s=1.0), tiny), lengths, 8, 16, None,
                          np.random.default_rng(0))
    assert tr.t.size == 500
    assert (tr.active == 1).sum() == 450


def test_lockstep_follows_the_running_count():
    # SD only at <= 2 running, every draft accepted (k 4: 5 tokens a step). Lengths 5, 5, 21, 41 in 4 slots:
    # iteration 0 prefills all (1 token each); 1-4 plain decode at 4 running (seqs 0, 1 finish); then 2
    # running at 5 a step: 20 -> 15 -> 10 -> 5 -> 0 and 40 -> 35 -> 30 -> 25 -> 20 (iterations 5-8), then
    # 20 -> 0 alone in 4 more (9-12): 13 iterations, the last 8 with SD.
    acc = BatchAcceptance((4, 4, 0), (4.0, 4.0, 0.0), (4.0, 4.0, 0.0))
    it = lockstep(np.array([5, 5, 21, 41]), 10, 4, traced_drafts(acc), np.random.default_rng(0))
    np.testing.assert_array_equal(it.k, [0] * 5 + [4] * 8)
    np.testing.assert_array_equal(it.active, [4] * 5 + [2] * 4 + [1] * 4)
    np.testing.assert_array_equal(it.new, [4] + [0] * 12)
    assert it.emitted.sum() == 72
    np.testing.assert_array_equal(it.q, [1.0] * 5 + [5.0] * 8)
    assert it.ctx_sum[5] == 2 * 10 + (1 + 4) + (1 + 4)  # prompts + tokens so far of the two long ones


def test_auto_pays_its_sd_path_at_every_decoding_step(tiny):
    # "auto" with SD off at any batch (k 0 everywhere) still runs the SD path each decoding step: 1 s a step
    # plus 0.25 s of SD-path overhead, against 1 s for plain decoding; the prefill step pays none
    engine = Engine(_free_roofline(iter_s=1.0, spec_iter_s=0.25), tiny)
    off = SDSetting(geometric(0.5, 4), 0.0, by_batch=BatchAcceptance((0,), (0.0,), (0.0,)))
    lengths = np.array([3, 6])
    assert simulate_replica(engine, lengths, 8, 2, None, np.random.default_rng(0)).time_s == pytest.approx(6.0)
    assert simulate_replica(engine, lengths, 8, 2, off, np.random.default_rng(0)).time_s == pytest.approx(6 + 5 * 0.25)
