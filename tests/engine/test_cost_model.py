"""The adaptive engine's cost model, worked by hand. Constants (engine/adaptive/constants.py): COST_DECAY 0.98, SCALE 64
(features in units of 64 tokens), PRIOR_WEIGHT 2, WEIGHT_READ_TOKENS 8 (a forward's weight read costs as much as
8 tokens' work)."""
import json

import pytest

from specrl.engine.adaptive.cost_model import CostModel, CostProfileError, LinearFit, solve


def test_solve_with_pivoting():
    # 2x + y = 3, x + 3y = 5: x = 0.8, y = 1.4
    assert solve([[2, 1], [1, 3]], [3, 5]) == pytest.approx([0.8, 1.4])
    assert solve([[0, 1], [1, 0]], [2, 3]) == pytest.approx([3, 2])  # a zero pivot needs the row swap
    with pytest.raises(ValueError, match="singular"):
        solve([[1, 2], [2, 4]], [1, 2])


def test_decayed_ridge_fit():
    fit = LinearFit(1, prior=[0.0], weight=2.0)
    fit.add([1.0], 3.0)
    assert fit.theta == pytest.approx([3 / (1 + 2)])  # (xy + w prior) / (xx + w) = 3 / 3
    fit.add([1.0], 3.0)
    # xx = 0.98 + 1 = 1.98, xy = 0.98 x 3 + 3 = 5.94: theta = 5.94 / 3.98
    assert fit.theta == pytest.approx([5.94 / 3.98])


def test_deterministic_mode_is_counted_work_and_never_learns():
    m = CostModel(1000, {"eagle3": 100, "ngram": 0}, deterministic=True)
    # target: (8 + tokens_in) units of one second; 64 tokens in: 8 + 64 = 72
    assert m.target_s(64, 16) == pytest.approx(72.0)
    assert m.target_s(128, 32) == pytest.approx(136.0)
    m.observe_target(64, 16, 0.001)
    assert m.target_s(64, 16) == pytest.approx(72.0)
    # eagle3 has a tenth of the target's weights: 0.1 s a token asked, no fixed cost; 32 tokens: 3.2 s
    assert m.draft_s("eagle3", 32, 4) == pytest.approx(3.2) and m.draft_slope("eagle3") == pytest.approx(0.1)
    assert m.catch_up_s("eagle3", 10) == pytest.approx(1.0)  # no catch-up timed: the draft slope per input
    assert m.draft_s("ngram", 32, 4) == pytest.approx(1e-7)  # model-free: no counted work (the floor)
    assert m.draft_s("eagle3", 0, 0) == 0.0


def test_measured_mode_scales_the_prior_to_the_first_forward():
    m = CostModel(1000, {"eagle3": 100})
    # 56 tokens in 0.64 s: 0.64 / (8 + 56) = 0.01 s a unit, so the prior becomes 0.08 + 0.01 x tokens_in,
    # which predicts this observation exactly: the ridge fit stays on the prior
    m.observe_target(56, 8, 0.64)
    assert m.target_s(56, 8) == pytest.approx(0.64)
    assert m.target_s(120, 8) == pytest.approx(0.08 + 0.01 * 120)
    assert m.draft_slope("eagle3") == pytest.approx(0.001)  # a tenth of 0.01 s a token
    m.observe_catch_up("eagle3", inputs=10, seconds=0.5)
    assert m.catch_up_s("eagle3", 4) == pytest.approx(0.2)  # measured: 0.05 s an input


def test_profile_round_trip(tmp_path):
    m = CostModel(1000, {"eagle3": 100})
    m.observe_target(56, 8, 0.64)
    (tmp_path / "p.json").write_text(json.dumps(m.state_dict()))  # a cost-model profile
    frozen = CostModel(1000, {"eagle3": 100}, deterministic=True)
    frozen.load_profile(tmp_path / "p.json")
    assert frozen.target_s(120, 8) == pytest.approx(m.target_s(120, 8))
    with pytest.raises(CostProfileError, match="does not exist"):
        frozen.load_profile(tmp_path / "absent.json")
    # a strategy profile (version 2) holds the model under "cost", whose own version is checked too
    (tmp_path / "s.json").write_text(json.dumps({"version": 2, "cost": {**m.state_dict(), "version": 99}}))
    with pytest.raises(CostProfileError, match="version 99, expected 1"):
        frozen.load_profile(tmp_path / "s.json")


def test_a_fit_saved_before_the_context_term_loads_with_attention_unobserved(tmp_path):
    """A profile of 3-feature target fits (before the context term) still loads: it predicts what it predicted
    over an empty cache, and the context term starts unobserved, to be learnt from this machine's forwards."""
    m = CostModel(1000, {"eagle3": 100})
    for t in (8, 16, 32, 64):
        m.observe_target(t, 8, 0.01 + 0.001 * t)
    state = m.state_dict()
    old = state["target"]
    old["xx"] = [row[:3] for row in old["xx"][:3]]
    old["xy"], old["prior"] = old["xy"][:3], old["prior"][:3]
    (tmp_path / "p.json").write_text(json.dumps(state))
    frozen = CostModel(1000, {"eagle3": 100}, deterministic=True)
    frozen.load_profile(tmp_path / "p.json")
    assert frozen.target_s(40, 8) == pytest.approx(m.target_s(40, 8))  # its observations had no context
    assert frozen.target.xy[3] == 0.0 and frozen.target.prior[3] == 0.0
    assert frozen.target_s(40, 8, 500.0) == pytest.approx(frozen.target_s(40, 8))  # unpriced until observed


def test_counted_work_prices_a_key_read_at_its_multiply_adds():
    # 1000 params; a query reading a key costs 50 multiply-adds: 0.05 tokens' work. 64 tokens at a context of
    # 100 keys: 8 + 64 x (1 + 100 x 0.05) = 392 units
    m = CostModel(1000, {}, deterministic=True, pair_work=50.0)
    assert m.target_s(64, 16, 100.0) == pytest.approx(392.0)
    assert m.target_s(64, 16) == pytest.approx(72.0)
