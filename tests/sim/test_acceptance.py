import numpy as np
import pytest

from specrl.sim.acceptance import (AcceptanceModel, BatchAcceptance, LengthAcceptance, _clt_steps,
                                   fit_batch_acceptance, fit_geometric, fit_length_acceptance,
                                   from_acceptance_length, geometric, sequence_steps)


def test_pmf_and_mean_by_hand():
    m = AcceptanceModel((0.5, 0.5))
    # P(a>=0)=1, P(a>=1)=.5, P(a>=2)=.25 -> pmf of a: .5, .25, .25; tau = 1*.5 + 2*.25 + 3*.25 = 1.75
    np.testing.assert_allclose(m.pmf, [0.5, 0.25, 0.25])
    assert m.mean_emitted == pytest.approx(1.75)


def test_acceptance_length_inverts():
    m = from_acceptance_length(3.0, 3)
    assert m.mean_emitted == pytest.approx(3.0, abs=1e-9)
    assert m.alphas[0] == pytest.approx(0.8105, abs=1e-3)  # 1 + a + a^2 + a^3 = 3
    with pytest.raises(ValueError, match="impossible"):
        from_acceptance_length(5.0, 3)


def test_full_acceptance_steps_are_ceil():
    rng = np.random.default_rng(0)
    # every draft accepted: k+1 = 5 tokens per step -> ceil(L / 5)
    np.testing.assert_array_equal(geometric(1.0, 4).steps_needed(np.array([10, 11, 1, 0]), rng),
                                  [2, 3, 1, 0])
    # nothing accepted: one token per step
    np.testing.assert_array_equal(geometric(0.0, 4).steps_needed(np.array([7, 3]), rng), [7, 3])


def test_exact_and_clt_agree_on_mean():
    m = geometric(0.7, 4)
    tokens = np.full(2000, 400)
    exact = m.steps_needed(tokens, np.random.default_rng(1)).mean()
    clt = _clt_steps(tokens, m.mean_emitted, m.var_emitted, 4, np.random.default_rng(2)).mean()
    assert exact == pytest.approx(400 / m.mean_emitted, rel=0.01)
    assert clt == pytest.approx(exact, rel=0.01)


def test_fit_geometric_from_counts():
    # 2 accepted drafts per sequence per step at k=4 -> tau = 3
    m = fit_geometric(np.array([20, 40]), np.array([10, 20]), 4)
    assert m.mean_emitted == pytest.approx(3.0, abs=1e-6)


def test_bad_acceptance_values():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        AcceptanceModel((1.2,))


def test_sequence_steps_reads_per_sequence_steps_off_the_active_counts():
    # 3 sequences; SD steps with 3, 3, 2, 1, 1 active: one took 5 steps, one 3, one 2
    lengths, steps = sequence_steps([5, 10, 3], [3, 3, 2, 1, 1])
    assert lengths.tolist() == [10, 5, 3] and steps.tolist() == [5, 3, 2]


def test_fit_length_acceptance_recovers_a_known_law():
    lengths = np.array([4, 8, 16, 32, 64, 128, 256])
    tau = 1.2 + 0.3 * np.log(lengths)
    fitted = fit_length_acceptance(lengths, (lengths - 1) / tau, k=4)
    assert fitted.c0 == pytest.approx(1.2, abs=1e-6) and fitted.c1 == pytest.approx(0.3, abs=1e-6)
    assert fit_length_acceptance(np.array([20, 21, 22, 23]), np.array([10, 10, 11, 11]), 4) is None  # no spread


def test_length_acceptance_gives_long_responses_fewer_steps_per_token():
    model = LengthAcceptance(c0=1.0, c1=0.5, k=4)
    rng = np.random.default_rng(0)
    lengths = np.array([8] * 4000 + [400] * 4000)
    steps = model.steps_needed(lengths - 1, lengths, rng)
    short, long = steps[:4000], steps[4000:]
    # each group steps like the geometric model of its own tau (short answers lose to the cut last step)
    tau_short, tau_long = model.tau(np.array([8, 400]))
    alone = from_acceptance_length(tau_short, 4).steps_needed(np.full(4000, 7), np.random.default_rng(1))
    assert short.mean() == pytest.approx(alone.mean(), rel=0.03)
    assert 399 / long.mean() == pytest.approx(tau_long, rel=0.03)
    assert tau_long > 1.5 * tau_short


def _rule(n):  # like "auto" with k_max 4 and max batch 8: 4 drafts at <= 4 running, 1 at 5..8, none above
    return 4 if n <= 4 else 1 if n <= 8 else 0


def test_fit_batch_acceptance_recovers_drafts_and_acceptance_per_batch_size():
    # bins (rule k, octave of n): n=1 -> (4, 1); n=2,3 -> (4, 2); n=4 -> (4, 3); n=5..7 -> (1, 3); n=8 -> (1, 4)
    truth = {1: (3.5, 3.0), 2: (3.0, 2.0), 3: (3.0, 2.0), 4: (2.0, 1.0), 6: (0.8, 0.5), 8: (0.9, 0.3)}
    rows = [{"phase": "spec", "active": n, "tokens_in": n * (1 + d), "accepted_tokens": n * a}
            for n, (d, a) in truth.items() for _ in range(5)]
    rows += [{"phase": "spec", "active": 20, "tokens_in": 20, "accepted_tokens": 0}] * 50  # SD off: ignored
    acc = fit_batch_acceptance(rows, _rule, n_max=8)
    assert acc.k == (4, 4, 4, 4, 1, 1, 1, 1, 0)  # batch sizes 1..9; the last entry holds above
    np.testing.assert_allclose(acc.drafts[:4], [3.5, 3.0, 3.0, 2.0])
    np.testing.assert_allclose(acc.accepted[:4], [3.0, 2.0, 2.0, 1.0])
    # n=5 and 7 were never seen: they take their bin (n=6); n=8 has its own bin
    np.testing.assert_allclose(acc.accepted[4:8], [0.5, 0.5, 0.5, 0.3])
    assert acc.index(100) == 8 and acc.accepted[8] == 0.0
    rng = np.random.default_rng(0)
    assert acc.sample_accepted(1, 20000, rng).mean() == pytest.approx(3.0, abs=0.03)
    assert acc.sample_accepted(50, 7, rng).tolist() == [0] * 7  # SD off: no drafts accepted


def test_batch_acceptance_refuses_impossible_values():
    with pytest.raises(ValueError, match="batch sizes \\[2\\]"):
        BatchAcceptance((4, 1), (3.0, 2.0), (1.0, 0.5))  # 2 drafts with k 1
