import numpy as np
import pytest

from specrl.sim.acceptance import (AcceptanceModel, _clt_steps, fit_geometric, from_acceptance_length,
                                   geometric)


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
