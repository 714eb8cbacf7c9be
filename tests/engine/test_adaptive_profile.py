"""The adaptive engine's saved profile (engine/adaptive/profile.py): it round-trips, it moves a fresh engine's
first plan, a wrong one is outweighed by what the engine observes, one for another model is ignored with a
warning, the shipped one fits the embedded policy, and it never changes the sampled tokens."""
import json
import logging

import pytest

from specrl import LLM, SamplingParams, SpecConfig
from specrl.engine.adaptive import profile
from specrl.engine.adaptive.arms import ALL
from specrl.engine.adaptive.strategy import AdaptiveStrategy
from specrl.engine.adaptive.constants import PLAN_EVERY, PROFILE_ROWS
from specrl.engine.adaptive.cost_model import STRATEGY_PROFILE_VERSION, CostModel, CostProfileError, read_profile
from specrl.engine.pool import DrafterPool
from specrl.engine.sequence import StepResult
from tests.engine.test_adaptive import PointDrafter, flat_cost, seqs, teach
from tests.helpers import tiny_model

NAMES = ["suffix", "eagle3"]


def strategy(deterministic=True):
    return AdaptiveStrategy(NAMES, {"suffix"}, 4, flat_cost(NAMES, deterministic))


def saved(tmp_path, target, suffix_accepts, eagle3_accepts, rows=2000):
    """A profile whose counts say suffix gets `suffix_accepts` of 4 drafts accepted, EAGLE-3 `eagle3_accepts`."""
    s = strategy()
    teach(s, "suffix", suffix_accepts, rows)
    teach(s, "eagle3", eagle3_accepts, rows)
    s.checks.add("eagle3@4", 16, 60.0, 100.0)  # a step that realised 0.6 of its predicted tokens
    path = tmp_path / "profile.json"
    profile.save(s, path, target, path="test")
    return path, s


def test_a_profile_round_trips_its_counts_checks_and_fits_as_a_prior(tmp_path):
    target = tiny_model()
    path, before = saved(tmp_path, target, 1, 3)
    state = json.loads(path.read_text())
    assert state["version"] == STRATEGY_PROFILE_VERSION and {"cost", "stats", "checks", "meta"} <= set(state)
    assert state["meta"]["drafters"] == NAMES and state["meta"]["model"] == profile.fingerprint(target)["model"]
    after = strategy()
    assert profile.load(after, path, target)
    for key in after.stats:
        assert after.stats[key].expected(4, optimistic=False) == \
            pytest.approx(before.stats[key].expected(4, optimistic=False), rel=0.05)  # up to the pseudo-row
        assert after.stats[key].rows <= PROFILE_ROWS  # its weight is a prior's, not 2000 rows'
    assert after.checks.factor("eagle3@4", 16) == pytest.approx(before.checks.factor("eagle3@4", 16))
    assert after.cost.target_s(20, 4) == pytest.approx(before.cost.target_s(20, 4))
    # a profile of counts alone (the shipped one) leaves the engine's own cost model as it is
    del state["cost"], state["checks"]
    path.write_text(json.dumps(state))
    counts = strategy(deterministic=False)
    target_s = counts.cost.target_s(20, 4)
    assert profile.load(counts, path, target) and counts.cost.target_s(20, 4) == target_s
    assert counts.stats["eagle3", ALL].rows == pytest.approx(PROFILE_ROWS)
    profile.save(before, path, target)
    # the cost model alone reads it too (vLLM's k schedule does)
    frozen = CostModel(1000, {n: 0 for n in NAMES}, deterministic=True)
    frozen.load_profile(path)
    assert frozen.target_s(20, 4) == pytest.approx(before.cost.target_s(20, 4))


def test_cost_fits_of_another_version_are_refused_by_auto_and_by_the_cost_model_alike(tmp_path):
    target = tiny_model()
    path, _ = saved(tmp_path, target, 1, 3)
    state = json.loads(path.read_text())
    state["cost"]["version"] = 99  # the fits' own version, inside a current adaptive-engine profile
    path.write_text(json.dumps(state))
    for load in (lambda: profile.load(strategy(), path, target),  # auto's path (rollout.spec.cost_profile)
                 lambda: CostModel(1000, {n: 0 for n in NAMES}, deterministic=True).load_profile(path)):  # vLLM's
        with pytest.raises(CostProfileError, match=r"version 99, expected 1.*--save-profile PATH"):
            load()


def test_a_prior_moves_the_first_plan(tmp_path):
    path, _ = saved(tmp_path, tiny_model(), 4, 0)
    pool = DrafterPool({"suffix": PointDrafter({i: 4 for i in range(4)}), "eagle3": PointDrafter({})})
    fresh = strategy()
    teach(fresh, "suffix", 1)
    fresh.schedule(seqs(4))
    assert fresh.arm.drafter == "eagle3"  # never seen: optimism tries it first
    primed = strategy()
    teach(primed, "suffix", 1)
    profile.load(primed, path, tiny_model())  # its counts replace those the engine held
    primed.schedule(seqs(4))
    assert primed.arm.label == "suffix@4"  # the profile says suffix pays and EAGLE-3 does not


def step(s, rows, plan, accepts):
    """One engine step of `plan` in which drafter d's drafts get `accepts[d]` accepted (all proposed)."""
    acc = [min(accepts[d], k) for d, k in zip(plan.drafters, plan.k)]
    s.update(StepResult("spec", rows, tokens_in=len(rows) * 5, emitted_tokens=len(rows) + sum(acc),
                        drafters_asked=list(plan.drafters), asked=list(plan.k), lengths=list(plan.k), accepted=acc))


def test_a_wrong_prior_is_outweighed_by_observed_acceptance_within_a_few_plans(tmp_path):
    path, _ = saved(tmp_path, tiny_model(), 1, 4)  # the profile says EAGLE-3 is always accepted ...
    s = strategy()
    profile.load(s, path, tiny_model())
    rows = seqs(16)
    pool = DrafterPool({"suffix": PointDrafter({i: 4 for i in range(16)}), "eagle3": PointDrafter({})})
    truth = {"suffix": 2, "eagle3": 0}  # ... but here it is never accepted, and suffix gets 2 of 4
    labels = []
    for _ in range(3 * PLAN_EVERY):
        plan = s.schedule(rows)
        labels.append(s.arm.label)
        step(s, rows, plan, truth)
    assert labels[0] == "eagle3@4"  # the prior's choice first ...
    assert labels[-PLAN_EVERY:] == ["suffix@4"] * PLAN_EVERY  # ... gone within three plans (2000 rows would not)


def test_a_profile_of_another_model_is_ignored_with_a_warning_naming_the_fix(tmp_path, caplog):
    path, _ = saved(tmp_path, tiny_model(hidden=48), 4, 0)
    s = strategy()
    with caplog.at_level(logging.WARNING):
        assert not profile.load(s, path, tiny_model())
    assert "ignored: it was measured on model" in caplog.text and "--save-profile PATH" in caplog.text
    assert s.stats["suffix", ALL].rows == 0  # nothing loaded
    with caplog.at_level(logging.WARNING):  # the same through the engine's setting
        LLM(tiny_model(), spec=SpecConfig(method="auto", drafters=("suffix",), cost_profile=str(path)))
    assert caplog.text.count("ignored: it was measured on") == 2
    (tmp_path / "bad.json").write_text(json.dumps({"version": 2, "cost": {}, "stats": []}))
    with pytest.raises(CostProfileError, match=r"is not a cost-model profile .*write a fresh one"):
        profile.load(strategy(), tmp_path / "bad.json", tiny_model())


def test_the_shipped_profile_fits_the_embedded_policy_and_no_other():
    from specrl.model.checkpoint import load_model
    from specrl.tasks import default_policy_path
    policy = load_model(default_policy_path())
    path = profile.shipped_path(SpecConfig(method="auto"), policy)
    assert path is not None and profile.mismatch(read_profile(path)["meta"], policy) is None
    assert profile.shipped_path(SpecConfig(method="auto", draft_model="/my/head"), policy) is None  # own drafters
    assert profile.shipped_path(SpecConfig(method="auto"), tiny_model()) is None


def test_a_prior_changes_which_drafts_run_never_the_tokens(tmp_path):
    model = tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=64)
    prompts = [[0, 5, 6, 5, 6, 5], [0, 9, 9, 9], [0, 3, 4, 3, 4]]
    params = SamplingParams(temperature=0.0, max_tokens=24, logprobs=0)
    base = LLM(model, max_num_seqs=4).generate(prompts, params)
    names = ("suffix", "ngram")
    for favour in names:
        s = AdaptiveStrategy(list(names), set(names), 4, flat_cost(list(names)))
        teach(s, favour, 4)
        path = tmp_path / f"{favour}.json"
        profile.save(s, path, model)
        spec = SpecConfig(method="auto", drafters=names, ngram_min=1, adaptive_mode="deterministic",
                          cost_profile=str(path))
        llm = LLM(model, spec=spec, max_num_seqs=4)
        other = next(n for n in names if n != favour)
        stats = llm.engine.strategy.stats
        assert stats[favour, ALL].rows > 0 == stats[other, ALL].rows  # the prior is loaded, and differs per run
        got = llm.generate(prompts, params)
        assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in base]
        for g, b in zip(got, base):
            assert g.outputs[0].logprobs == pytest.approx(b.outputs[0].logprobs, abs=1e-5)


def test_an_llm_saves_what_auto_learnt_as_a_profile_that_a_fresh_engine_loads(tmp_path):
    model = tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=64)
    auto = {"drafters": ("suffix", "ngram"), "mode": "deterministic"}
    spec = dict(method="auto", options={"auto": auto, "ngram": {"min": 1}})
    llm = LLM(model, spec=SpecConfig(**spec), max_num_seqs=4)
    llm.generate([[0, 5, 6, 5, 6, 5], [0, 3, 4, 3, 4]], SamplingParams(temperature=0.0, max_tokens=24))
    path = tmp_path / "auto.json"
    llm.save_cost_profile(path, {"path": "tiny"})
    meta = read_profile(path)["meta"]
    assert meta["path"] == "tiny" and meta["drafters"] == ["suffix", "ngram"]
    assert profile.mismatch(meta, model) is None  # its fingerprint is this engine's
    fresh = LLM(model, spec=SpecConfig(**spec), max_num_seqs=4).engine.strategy.stats
    primed = LLM(model, spec=SpecConfig(method="auto", options={"auto": {**auto, "cost_profile": str(path)},
                                                                "ngram": {"min": 1}}),
                 max_num_seqs=4).engine.strategy.stats
    assert sum(s.rows for s in fresh.values()) == 0 < sum(s.rows for s in primed.values())  # the prior is loaded


@pytest.mark.parametrize("method", [None, "ngram"])
def test_an_llm_without_auto_refuses_to_save_a_profile_in_one_line(tmp_path, method):
    from specrl.errors import UserError
    llm = LLM(tiny_model(), spec=SpecConfig(method=method))
    with pytest.raises(UserError) as e:
        llm.save_cost_profile(tmp_path / "p.json")
    assert str(e.value) == (f"save_cost_profile: this engine's method is {method!r}, which learns no cost profile; "
                            "build the LLM with SpecConfig(method='auto')")
    assert not (tmp_path / "p.json").exists()
