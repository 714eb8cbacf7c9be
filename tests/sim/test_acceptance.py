import numpy as np
import pytest

from specrl.sim.acceptance import (AcceptanceModel, LengthAcceptance, _clt_steps, fit_geometric,
                                   fit_length_acceptance, from_acceptance_length, geometric, sequence_steps)


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
