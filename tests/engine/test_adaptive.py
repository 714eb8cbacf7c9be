"""The adaptive engine ("auto"): its cost model, its per-row decision, its bandit, its deterministic mode and
checkpointed state, and the errors of its settings. Exactness of its mixed batches: tests/drafters."""
import json

import pytest

from specrl import LLM, SamplingParams, SpecConfig
from specrl.config.build import ConfigError, from_dict
from specrl.engine.adaptive.arms import ALL, FILL, FULL, OFF, Arm
from specrl.engine.adaptive.strategy import AdaptiveStrategy
from specrl.engine.adaptive.constants import PLAN_EVERY
from specrl.engine.adaptive.cost_model import CostModel, CostProfileError
from specrl.engine.pool import Deferred
from specrl.engine.drafting import Shadow, pad_proposals
from specrl.engine.steps import draft, shadow_drafts
from specrl.engine.pool import DrafterPool
from specrl.engine.sequence import StepResult
from specrl.engine.sequence import Sequence
from specrl.engine.sampler import SamplingParams as SP
from specrl.config.run import TrainConfig
from tests.helpers import tiny_model


def test_the_cost_model_fits_the_engines_timings_and_follows_a_change():
    cost = CostModel(1000, {"eagle3": 100})
    for tokens, batch in [(4, 4), (8, 4), (16, 8), (32, 8), (64, 64), (128, 64), (256, 64)] * 10:
        cost.observe_target(tokens, batch, 0.010 + 0.0002 * tokens)
        cost.observe_draft("eagle3", tokens, tokens // batch, 0.001 + 0.00005 * tokens + 0.0003 * (tokens // batch))
    assert cost.target_s(100, 32) == pytest.approx(0.010 + 0.0002 * 100, rel=0.05)
    assert cost.draft_s("eagle3", 40, 4) == pytest.approx(0.001 + 0.00005 * 40 + 0.0003 * 4, rel=0.2)  # ridge-shrunk
    # the same engine on a slower path (bf16 on a CPU without AMX): tokens cost 5x, and the fit follows
    for tokens, batch in [(4, 4), (16, 8), (64, 64), (256, 64)] * 60:
        cost.observe_target(tokens, batch, 0.010 + 0.001 * tokens)
    assert cost.target_s(100, 32) == pytest.approx(0.010 + 0.001 * 100, rel=0.05)


def test_the_warm_up_profile_keeps_the_fastest_timing_of_each_point():
    """A timing slowed by another process (here the first of each point, 10x) must not tilt the fitted cost per
    token: the plan's draft length rests on it. The fit equals that of a quiet machine."""
    def profile(spiked: bool) -> CostModel:
        calls: dict = {}

        def time_forward(batch: int, length: int, context: int) -> float:
            calls[batch, length] = calls.get((batch, length), 0) + 1
            quiet = 0.010 + 0.0005 * batch * length  # seconds: a fixed cost and one per token
            return 10 * quiet if spiked and calls[batch, length] == 1 else quiet
        strategy = AdaptiveStrategy(["suffix"], {"suffix"}, 4, CostModel(1000, {"suffix": 0}))
        strategy.calibrate(time_forward, 4)
        return strategy.cost
    quiet, spiked = profile(False), profile(True)
    for batch, length in [(1, 1), (1, 5), (4, 3)]:
        assert spiked.target_s(batch * length, batch) == pytest.approx(quiet.target_s(batch * length, batch))


def _calibrated(model, quiet_s: float = 0.010):
    """A fresh strategy calibrated over `model`, and the forwards it timed."""
    calls = []

    def time_forward(batch: int, length: int, context: int) -> float:
        calls.append((batch, length, context))
        return quiet_s + 0.0005 * batch * length + 1e-6 * batch * length * context
    strategy = AdaptiveStrategy(["suffix"], {"suffix"}, 4, CostModel(1000, {"suffix": 0}))
    strategy.calibrate(time_forward, 4, model, max_len=64)
    return strategy.cost, calls


def test_the_warm_up_profile_is_cached_per_machine_and_replayed(tmp_path, monkeypatch, caplog):
    """The first engine of a model times the grid; the next replays it (no forward) with the same fit; a busy
    machine's timings are not cached; another model, or a corrupt file, is timed again."""
    from specrl.engine.adaptive import warmup_cache
    from specrl.model import precision
    monkeypatch.setenv("SPECRL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(precision, "machine_load", lambda: 0.0)
    model = tiny_model()
    first, calls = _calibrated(model)
    # a warm-up forward, then 3 repeats of batch 1, 2, 4 x 1, 2, 3, 5 tokens over an empty cache, and of 1 and 5
    # tokens after 59 cached ones (max_len 64 less the longest forward)
    assert len(calls) == 1 + 3 * 3 * (4 + 2) == 55
    assert {c for _, _, c in calls} == {0, 59} and {t for _, t, c in calls if c} == {1, 5}
    again, calls = _calibrated(model, quiet_s=1.0)  # a replay: the timer is never called
    assert calls == [] and again.target_s(12, 4, 30.0) == pytest.approx(first.target_s(12, 4, 30.0))
    _, calls = _calibrated(tiny_model(layers=1))  # another shape: its own entry
    assert len(calls) == 55
    monkeypatch.setattr(precision, "machine_load", lambda: 99.0)  # busy: timed, used, not cached
    other = tiny_model(layers=3)
    assert len(_calibrated(other)[1]) == 55 and len(_calibrated(other)[1]) == 55
    warmup_cache.cache_path().write_text("{not json")
    with caplog.at_level("WARNING"):
        assert len(_calibrated(model)[1]) == 55
    assert "is corrupt" in caplog.text


def test_the_warm_up_at_a_cached_context_prices_attention():
    """Timings with a fixed cost, one per token and one per key a query reads (attention): the profile's points at
    a cached context give the fit its price per key, so it predicts forwards at contexts it never timed."""
    def true_s(batch: int, length: int, context: float) -> float:  # context: the keys a query reads on average
        return 0.010 + 0.0005 * batch * length + 2e-6 * batch * length * context
    strategy = AdaptiveStrategy(["suffix"], {"suffix"}, 4, CostModel(1000, {"suffix": 0}))
    strategy.calibrate(lambda b, t, c: true_s(b, t, c + (t + 1) / 2), 32, max_len=600)
    for batch, length, context in [(32, 1, 400.0), (32, 5, 402.0), (8, 5, 202.0), (1, 1, 50.0)]:
        assert strategy.cost.target_s(batch * length, batch, context) == pytest.approx(
            true_s(batch, length, context), rel=0.05)
    # over an empty cache only, the same fit underprices decoding at a context of 400 by half
    blind = AdaptiveStrategy(["suffix"], {"suffix"}, 4, CostModel(1000, {"suffix": 0}))
    blind.calibrate(lambda b, t, c: true_s(b, t, c + (t + 1) / 2), 32, max_len=0)
    assert blind.cost.target_s(32, 32, 400.0) < 0.6 * true_s(32, 1, 400.0)


def test_where_attention_dominates_long_rows_are_not_drafted():
    """A verify forward of k + 1 queries a row reads the row's keys k + 1 times, a decode once: at a long context
    attention makes the verify cost nearly k + 1 decodes, and the same acceptance no longer pays. The plan
    follows the rows' mean length."""
    strategy = AdaptiveStrategy(["suffix"], {"suffix"}, 4, CostModel(1000, {"suffix": 0}))
    strategy.calibrate(lambda b, t, c: 0.020 + 0.00005 * b * t + 2e-6 * b * t * (c + (t + 1) / 2), 32, max_len=4096)
    strategy.stats["suffix", ALL].load_state_dict(_counted(0.5, 4, rows=1e6))
    short, long = strategy.best_arm(32, length=20.0), strategy.best_arm(32, length=3000.0)
    assert short.drafter == "suffix" and long.drafter is None
    # the schedule prices its plan at the rows' own mean length, when it next plans (every PLAN_EVERY steps)
    rows = lambda n: [Sequence(i, i, 0, list(range(n)), SP(max_tokens=100), i, 4096, slot=i) for i in range(32)]
    assert strategy.schedule(rows(20)).label == short.label
    labels = [strategy.schedule(rows(3000)).label for _ in range(PLAN_EVERY)]
    assert labels == [short.label] * (PLAN_EVERY - 1) + ["off"]


def _counted(alpha: float, k: int, rows: float) -> dict:
    """`AcceptanceStats` counts of `rows` rows asked for k, each position accepted at `alpha`."""
    from specrl.sim.auto import counts_from_model
    from specrl.sim.acceptance import AcceptanceModel
    return counts_from_model(AcceptanceModel((alpha,) * k), k, rows=rows)


def test_a_deterministic_cost_model_never_learns_and_counts_work():
    cost = CostModel(1000, {"suffix": 0, "eagle3": 100}, deterministic=True)
    before = cost.target_s(64, 64)
    cost.observe_target(64, 64, 123.0)
    assert cost.target_s(64, 64) == before
    assert cost.target_s(128, 64) > before  # more tokens, more work
    assert cost.draft_slope("suffix") == 0.0 < cost.draft_slope("eagle3")


def test_profiles_round_trip_and_bad_ones_are_clear_errors(tmp_path):
    cost = CostModel(1000, {"suffix": 0})
    for t in (4, 8, 16, 32):
        cost.observe_target(t, 4, 0.01 + 0.001 * t)
    (tmp_path / "p.json").write_text(json.dumps(cost.state_dict()))  # a cost-model profile
    frozen = CostModel(1000, {"suffix": 0}, deterministic=True)
    frozen.load_profile(tmp_path / "p.json")
    assert frozen.target_s(20, 4) == pytest.approx(cost.target_s(20, 4))
    with pytest.raises(CostProfileError, match=r"cost_profile '.*nope.json' does not exist: .*--save-profile"):
        frozen.load_profile(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(CostProfileError, match=r"is not a cost-model profile .*write a fresh one"):
        frozen.load_profile(tmp_path / "bad.json")
    (tmp_path / "old.json").write_text(json.dumps({"version": 99}))
    with pytest.raises(CostProfileError, match="version 99"):
        frozen.load_profile(tmp_path / "old.json")
    state = json.loads((tmp_path / "p.json").read_text())
    state["drafters"]["suffix"]["xy"] = [0.0, 0.0]  # a fit from a version with other features
    (tmp_path / "other.json").write_text(json.dumps(state))
    with pytest.raises(CostProfileError, match="a fit of 2 features where this version has 3"):
        frozen.load_profile(tmp_path / "other.json")
    with pytest.raises(CostProfileError, match="does not exist"):
        LLM(tiny_model(), spec=SpecConfig(method="auto", drafters=("suffix",), cost_profile=str(tmp_path / "x")))


def test_removed_settings_name_what_replaced_them():
    with pytest.raises(ConfigError, match=r"'auto_max_batch' was removed: .*cost model.*delete the key"):
        from_dict(SpecConfig, {"method": "auto", "auto_max_batch": 32})
    with pytest.raises(ConfigError, match=r"'auto_methods' was removed: .*rename auto_methods to auto.drafters"):
        from_dict(SpecConfig, {"method": "auto", "auto_methods": ["suffix"]})
    with pytest.raises(ConfigError, match=r"config key 'rollout.spec.auto_methods' was removed: .*drafters"):
        from_dict(TrainConfig, {"rollout": {"spec": {"auto_methods": ["suffix"]}}})
    with pytest.raises(ConfigError, match=r"config key 'rollout.spec.auto_max_batch' was removed"):
        from_dict(TrainConfig, {"rollout": {"spec": {"method": "auto", "auto_max_batch": 32}}})
    with pytest.raises(ValueError, match=r"auto.mode='fast' is invalid: expected one of \['measured', 'deterministic'\]"):
        SpecConfig(method="auto", adaptive_mode="fast")


def test_auto_over_drafters_none_of_which_can_be_built_names_them_and_the_fix(tmp_path):
    spec = SpecConfig(method="auto", drafters=("eagle3", "draft_model"), draft_model=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=r"drafters=\['eagle3', 'draft_model'\], but none of them can be built here: "
                                         r"eagle3: .*missing.*draft_model: .*specrl train-drafter --method eagle3"):
        LLM(tiny_model(), spec=spec)
    # one that can be built is enough: the other is left out
    llm = LLM(tiny_model(), spec=SpecConfig(method="auto", drafters=("eagle3", "suffix"),
                                            draft_model=str(tmp_path / "missing")))
    assert list(llm.drafter.drafters) == ["suffix"]


class PointDrafter:
    """Proposes `per_row[b]` copies of token 1 for row b (a model-free drafter's signal: its draft length)."""
    hidden_layers = ()

    def __init__(self, per_row):
        self.per_row, self.calls = per_row, 0

    def observe(self, fwd):
        pass

    def propose(self, seqs, k):
        self.calls += 1
        return pad_proposals([[1] * min(ki, self.per_row[s.seq_id]) for s, ki in zip(seqs, k)], "cpu")

    def release(self, seq):
        pass


def seqs(n):
    return [Sequence(i, i, 0, [0, 1, 2], SP(max_tokens=100), i, 200, slot=i) for i in range(n)]


def flat_cost(names, deterministic=True):
    """A forward costs the same whatever it verifies, drafting costs nothing: drafting always pays."""
    cost = CostModel(1000, {n: 0 for n in names}, deterministic=deterministic)
    cost.target.set_prior([1.0, 1e-6, 0.0, 0.0])
    return cost


def teach(strategy, name, accepted_of_4, rows=200):
    """`rows` rows of drafter `name` asked for 4 tokens with `accepted_of_4` accepted (all proposed)."""
    strategy.stats[name, ALL].add([4] * rows, [4] * rows, [accepted_of_4] * rows)
    if name in strategy.point:
        strategy.stats[name, FULL].add([4] * rows, [4] * rows, [accepted_of_4] * rows)


def test_acceptance_counts_price_every_shorter_draft():
    from specrl.engine.adaptive.acceptance import AcceptanceStats
    stats = AcceptanceStats(4)
    # two rows asked for 4: one accepted 2 (positions 0, 1 accepted, 2 rejected), one accepted all 4
    stats.add([4, 4], [4, 4], [2, 4])
    assert stats.reached == [2.0, 2.0, 2.0, 1.0] and stats.accepted == [2.0, 2.0, 1.0, 1.0]
    # without optimism alpha_j = (accepted_j + prior_j) / (reached_j + 1), prior_j = alpha_{j-1} (1/2 for j = 0):
    # alpha_0 = 2.5 / 3, alpha_1 = (2 + alpha_0) / 3
    a = [2.5 / 3, (2 + 2.5 / 3) / 3]
    assert stats.expected(2, optimistic=False) == pytest.approx(a[0] + a[0] * a[1])
    assert stats.expected(4, optimistic=False) > stats.expected(2, optimistic=False)
    assert stats.expected(4) > stats.expected(4, optimistic=False)  # few rows: the bonus makes it look better
    # a suffix drafter that proposed nothing for a row: asked 4, got 0 -> its full-length share falls
    stats.add([4], [0], [0])
    assert stats.full_share(4) == pytest.approx((2 * 0.99 + 0.5) / (2 * 0.99 + 1 + 1))  # decayed 2 of 3, prior 1/2


def test_the_plan_takes_the_drafter_whose_counts_favour_it_and_a_hybrid_for_long_matches():
    rows = seqs(3)
    pool = DrafterPool({"suffix": PointDrafter({0: 4, 1: 0, 2: 4}), "eagle3": PointDrafter({0: 4, 1: 4, 2: 4})})
    strategy = AdaptiveStrategy(["suffix", "eagle3"], {"suffix"}, 4, flat_cost(["suffix", "eagle3"]))
    teach(strategy, "suffix", 4)  # a full suffix match is always accepted ...
    strategy.stats["suffix", ALL].add([4] * 400, [0] * 400, [0] * 400)  # ... but most rows have none
    teach(strategy, "eagle3", 2)
    plan = strategy.schedule(rows)
    assert strategy.arm.label == "suffix+eagle3@4"
    assert (plan.lead, plan.drafters, plan.k) == ("suffix", ["eagle3"] * 3, [4, 4, 4])  # no draft made yet
    assert pool.drafters["suffix"].calls == 0
    # the run: rows 0 and 2 have a full-length suffix match and keep it; row 1 has none, so EAGLE-3 drafts for it
    drafted = draft(pool.drafters, rows, plan.capped(rows), 8, "cpu")
    assert drafted.drafters == ["suffix", "eagle3", "suffix"] and drafted.proposal.lengths.tolist() == [4, 4, 4]
    assert pool.drafters["suffix"].calls == 1  # the lead's proposal is cut to its rows, not made again
    assert set(drafted.seconds) == {"suffix", "eagle3"}  # each drafter's time, for the strategy to learn


def test_a_model_drafter_filling_in_a_hybrid_is_counted_apart_from_its_rows_at_large():
    # The rows a hybrid's model drafter gets are those without a full suffix match: harder than a row taken at
    # random. Their counts go to ("eagle3", FILL), which prices the hybrid; ("eagle3", ALL) (the drafter alone)
    # keeps its own.
    rows = seqs(3)
    pool = DrafterPool({"suffix": PointDrafter({0: 4, 1: 0, 2: 4}), "eagle3": PointDrafter({0: 4, 1: 4, 2: 4})})
    strategy = AdaptiveStrategy(["suffix", "eagle3"], {"suffix"}, 4, flat_cost(["suffix", "eagle3"]))
    teach(strategy, "suffix", 4)
    strategy.stats["suffix", ALL].add([4] * 400, [0] * 400, [0] * 400)
    teach(strategy, "eagle3", 2)
    plan = strategy.schedule(rows)
    which = draft(pool.drafters, rows, plan.capped(rows), 8, "cpu").drafters
    assert strategy.arm.label == "suffix+eagle3@4" and which == ["suffix", "eagle3", "suffix"]
    alone = list(strategy.stats["eagle3", ALL].reached)
    strategy.update(StepResult("spec", rows, tokens_in=15, emitted_tokens=10, drafters_asked=which,
                               asked=[4, 4, 4], lengths=[4, 4, 4], accepted=[4, 0, 4]))
    assert strategy.stats["eagle3", ALL].reached == alone
    assert strategy.stats["eagle3", FILL].reached == [1.0, 0.0, 0.0, 0.0]  # row 1: its first draft was rejected
    assert strategy.stats["eagle3", FILL].accepted == [0.0] * 4
    # the hybrid is now priced with the fill-in rows' acceptance, the drafter alone still with its own
    assert strategy.stats["eagle3", FILL].expected(4, False) < strategy.stats["eagle3", ALL].expected(4, False)

    # the counts are learned state, keyed (drafter, kind); a checkpoint with the older "eagle3~"-style string
    # keys loads into the same keys
    again = AdaptiveStrategy(["suffix", "eagle3"], {"suffix"}, 4, flat_cost(["suffix", "eagle3"]))
    state = strategy.state_dict()
    again.load_state_dict(state)
    assert {key: c.state_dict() for key, c in again.stats.items()} == {k: c.state_dict() for k, c in strategy.stats.items()}
    old = {**state, "stats": {name + {ALL: "", FULL: "*", FILL: "~"}[kind]: sub for (name, kind), sub in state["stats"]}}
    assert set(old["stats"]) == {"suffix", "suffix*", "eagle3", "eagle3~"}
    again = AdaptiveStrategy(["suffix", "eagle3"], {"suffix"}, 4, flat_cost(["suffix", "eagle3"]))
    again.load_state_dict(old)
    assert {key: c.state_dict() for key, c in again.stats.items()} == {k: c.state_dict() for k, c in strategy.stats.items()}


def test_sd_is_off_when_a_verified_token_costs_as_much_as_a_forward():
    rows = seqs(64)
    cost = CostModel(1000, {"suffix": 0}, deterministic=True)
    cost.target.set_prior([1e-6, 64.0, 0.0, 0.0])  # seconds = tokens: no fixed cost left to amortise
    strategy = AdaptiveStrategy(["suffix"], {"suffix"}, 4, cost)
    teach(strategy, "suffix", 3)
    assert strategy.schedule(rows).drafters == [None] * 64 and strategy.arm == OFF


def test_an_arm_that_runs_slower_than_predicted_is_priced_by_what_it_realised():
    # The model says suffix@4 pays (a forward costs the same whatever it verifies, 3 of 4 drafts accepted), but
    # every step it runs emits B tokens in 8 forwards' time (costs the model cannot see: a drafter's catch-up,
    # bookkeeping). The realised / predicted rate moves the choice to no draft within a few plans.
    rows = seqs(4)
    cost = flat_cost(["suffix"], deterministic=False)
    cost.target.weight = 1e12  # the forward's fit stays where it is: only the check can move the choice
    strategy = AdaptiveStrategy(["suffix"], {"suffix"}, 4, cost)
    strategy.arms = [OFF, Arm("suffix", 4)]
    teach(strategy, "suffix", 3)
    forward = cost.target_s(4, 4)
    assert strategy.schedule(rows).k == [4] * 4
    for _ in range(3 * PLAN_EVERY):
        if strategy.arm == OFF:
            break
        strategy.update(StepResult("spec", rows, tokens_in=4, emitted_tokens=4, drafters_asked=[None] * 4,
                                   asked=[0] * 4, lengths=[0] * 4, accepted=[0] * 4, verify_s=8 * forward))
        strategy.schedule(rows)
    assert strategy.arm == OFF and strategy.checks.factor("suffix@4", 4) < 0.5
    assert strategy.checks.factor("off", 4) == 1.0  # an arm that has not run keeps the model's figure
    # the check is learned state: a checkpoint keeps it
    again = AdaptiveStrategy(["suffix"], {"suffix"}, 4, flat_cost(["suffix"], deterministic=False))
    again.load_state_dict(strategy.state_dict())
    assert again.checks.factor("suffix@4", 4) == pytest.approx(strategy.checks.factor("suffix@4", 4))


def test_plain_decoding_is_re_measured_while_drafting_and_wins_back_when_it_was_overpriced():
    """The model prices plain decoding far too high (on a CPU, attention over long contexts hides in such fits)
    and drafting realises what it predicts: without ever running plain decoding, nothing would correct that.
    Every ANCHOR_EVERY drafting steps one plain step runs; its realised rate moves the choice to plain decoding.
    A deterministic engine (no clock) never anchors: its choices stay a function of the seeds."""
    from specrl.engine.adaptive.constants import ANCHOR_EVERY

    def run(deterministic: bool) -> list:
        rows = seqs(4)
        cost = flat_cost(["suffix"], deterministic=deterministic)
        cost.target.weight = 1e12  # the forward's fit stays where it is: only the checks move the choice
        strategy = AdaptiveStrategy(["suffix"], {"suffix"}, 4, cost)
        strategy.arms = [OFF, Arm("suffix", 4)]
        teach(strategy, "suffix", 3)  # 3 of 4 accepted: drafting yields 4 tokens a row and forward
        arms = []
        for _ in range(3 * ANCHOR_EVERY):
            strategy.schedule(rows)
            arms.append(strategy.arm)
            if strategy.arm == OFF:  # a plain step takes a small share of the predicted forward
                strategy.update(StepResult("decode", rows, tokens_in=4, emitted_tokens=4, verify_s=0.01))
            else:  # a drafting step takes what the model predicts
                strategy.update(StepResult("spec", rows, tokens_in=20, emitted_tokens=16,
                                           drafters_asked=["suffix"] * 4, asked=[4] * 4, lengths=[4] * 4,
                                           accepted=[3] * 4, verify_s=cost.target_s(20, 4)))
        return arms
    measured = run(False)
    assert OFF not in measured[:ANCHOR_EVERY] and measured[ANCHOR_EVERY] == OFF  # the anchor step
    assert measured[-ANCHOR_EVERY:] == [OFF] * ANCHOR_EVERY  # it then keeps to what realised more
    assert OFF not in run(True)


def test_the_rate_check_of_an_exactly_predicted_arm_stays_at_one_however_its_steps_vary():
    # At one row a point drafter's step emits 1 token (its match rejected) or 5 (taken whole): predicted 3 per
    # step, realised 1, 5, 1, 5, ... The check is a ratio of sums, so it stays at 1; the mean of per-step log
    # ratios would sit at exp((log 1/3 + log 5/3) / 2) = 0.75 and price the drafter a quarter too low.
    from specrl.engine.adaptive.ratecheck import RateChecks
    checks = RateChecks()
    for i in range(40):
        checks.add("suffix@4", 1, 1.0 if i % 2 else 5.0, 3.0)
        checks.add("eagle3@4", 1, 1.5, 3.0)  # one that realises half its prediction, every step
    assert checks.factor("suffix@4", 1) == pytest.approx(1.0, abs=0.03)  # the decay weighs the last steps more
    assert checks.factor("eagle3@4", 1) == pytest.approx(0.5, abs=0.02)
    assert checks.factor("eagle3@4", 64) == pytest.approx(0.5, abs=0.02)  # another B: its figure at any B


def test_a_deferred_model_drafter_is_charged_its_catch_up_for_every_token_the_step_appends():
    # EAGLE-3 left idle defers its observations; drafting again, it first observes every token appended since,
    # on all rows. An arm that uses it pays that per step: measured seconds per input x rows x (1 + accepted).
    cost = flat_cost(["suffix", "eagle3"], deterministic=False)
    strategy = AdaptiveStrategy(["suffix", "eagle3"], {"suffix"}, 4, cost)
    teach(strategy, "eagle3", 2)
    arm = Arm("eagle3", 4)
    before = strategy.predicted_rate(arm, 8, optimistic=False)
    strategy.deferred = {"eagle3": None}  # its pricing reads the name only
    cost.observe_catch_up("eagle3", 100, 0.5)  # 5 ms an input
    draft = strategy.stats["eagle3", ALL].expected(4, optimistic=False)
    seconds = 8 * (1 + draft) / before + 0.005 * 8 * (1 + draft)
    assert strategy.predicted_rate(arm, 8, optimistic=False) == pytest.approx(8 * (1 + draft) / seconds)
    assert strategy.predicted_rate(Arm("suffix", 4), 8) == pytest.approx(  # a model-free arm is not charged
        AdaptiveStrategy(["suffix", "eagle3"], {"suffix"}, 4, cost).predicted_rate(Arm("suffix", 4), 8))
    # the measured per-input cost is learned state: a checkpoint or a saved profile keeps it
    again = CostModel(1000, {"suffix": 0, "eagle3": 0})
    again.load_state_dict(cost.state_dict())
    assert again.catch_up_s("eagle3", 10) == pytest.approx(0.05)


def test_an_untried_drafter_is_tried_where_trying_could_pay_and_the_plan_is_reused():
    cost = flat_cost(["suffix", "eagle3"])
    strategy = AdaptiveStrategy(["suffix", "eagle3"], {"suffix"}, 4, cost)
    teach(strategy, "suffix", 1)
    strategy.schedule(seqs(2))
    assert strategy.arm.drafter == "eagle3"  # never seen: optimism tries it
    teach(strategy, "eagle3", 0)  # it turns out useless ...
    strategy.schedule(seqs(2))
    assert strategy.arm.drafter == "suffix"  # ... and is dropped at once, not PLAN_EVERY steps later
    arm = strategy.arm
    teach(strategy, "eagle3", 4)  # better now, but the plan holds until it is PLAN_EVERY steps old
    strategy.schedule(seqs(2))
    assert strategy.arm == arm


def test_shadow_drafts_teach_a_model_free_drafter_without_drafting():
    rows = seqs(2)
    strategy = AdaptiveStrategy(["suffix"], {"suffix"}, 4, flat_cost(["suffix"]))
    strategy.arms = [OFF]  # it never drafts: what it learns comes from the shadow drafts alone
    pool = DrafterPool({"suffix": PointDrafter({0: 4, 1: 4})})  # proposes [1, 1, 1, 1]
    plan = strategy.schedule(rows)
    assert plan.drafters == [None, None] and plan.shadows == [Shadow("suffix", [0, 1], 4)]
    shadows = shadow_drafts(pool.drafters, rows, plan.shadows)  # the engine's run drafts them
    rows[0].append([1, 1, 5], [0.0] * 3)  # row 0 emitted 1, 1, 5: two drafts would have been accepted
    rows[1].append([7], [0.0])  # row 1 emitted 7: the first draft would have been rejected
    strategy.update(StepResult("spec", rows, tokens_in=2, emitted_tokens=4, drafters_asked=[None, None],
                               asked=[0, 0], lengths=[0, 0], accepted=[0, 0], shadows=shadows))
    # row 0: drafts 1, 2 accepted, the third rejected; row 1: the first rejected (positions past a rejection
    # are never reached)
    assert strategy.stats["suffix", ALL].reached[:3] == [2.0, 1.0, 1.0]
    assert strategy.stats["suffix", ALL].accepted[:3] == [1.0, 1.0, 0.0]


def test_row_rates_are_decayed_sums_of_the_rows_shrunk_towards_the_counts():
    from specrl.engine.adaptive.ratecheck import RowRates
    from specrl.engine.adaptive.constants import ROW_DECAY, ROW_PRIOR_DRAFTS
    rates = RowRates()
    rates.add(0, "suffix", 1, 2.0)  # row 0 accepted 1 draft where the counts expected 2 ...
    rates.add(0, "suffix", 1, 2.0)  # ... twice: sums 0.9 * 1 + 1 = 1.9 accepted, 0.9 * 2 + 2 = 3.8 expected
    rates.add(1, "suffix", 3, 2.0)  # row 1 did better than expected
    assert ROW_DECAY == 0.9 and ROW_PRIOR_DRAFTS == 4.0
    assert rates.factor([0], "suffix") == pytest.approx((4 + 1.9) / (4 + 3.8))
    assert rates.factor([0, 1], "suffix") == pytest.approx((4 + 1.9 + 3) / (4 + 3.8 + 2))
    assert rates.factor([0], "ngram") == rates.factor([7], "suffix") == 1.0  # nothing seen: the counts stand
    rates.keep([1])  # row 0 finished
    assert rates.factor([0], "suffix") == 1.0 and rates.factor([1], "suffix") == pytest.approx(7 / 6)


def test_rows_that_accept_a_drafter_less_than_its_counts_get_another_drafter_and_new_rows_do_not():
    # The long tail: the rows still running accept the model-free drafter's drafts far below what its counts
    # (pooled over every row) expect. The plan for those rows turns to the drafter they do accept; rows that
    # have not shown it are priced by the counts again.
    strategy = AdaptiveStrategy(["suffix", "eagle3"], {"suffix"}, 4, flat_cost(["suffix", "eagle3"]))
    teach(strategy, "suffix", 3, rows=100_000)  # counts that one step's rows cannot move
    teach(strategy, "eagle3", 2, rows=100_000)
    tail = seqs(6)[:2]
    strategy.schedule(tail)
    assert strategy.arm.label == "suffix@4"
    for _ in range(PLAN_EVERY):  # the tail's rows reject every suffix draft
        strategy.schedule(tail)
        strategy.update(StepResult("spec", tail, tokens_in=10, emitted_tokens=2, drafters_asked=["suffix"] * 2,
                                   asked=[4, 4], lengths=[4, 4], accepted=[0, 0]))
    strategy.schedule(tail)  # a new plan
    assert strategy.arm.drafter == "eagle3"
    assert strategy.stats["suffix", ALL].expected(4, False) > strategy.stats["eagle3", ALL].expected(4, False)
    strategy.schedule(seqs(6)[2:])  # other rows, a new plan: the counts price them again
    assert strategy.arm.label == "suffix@4"


def test_rows_that_accept_more_than_the_counts_never_expect_every_draft():
    # MAX_ALPHA keeps a drafter's expectation below k, or a certain drafter would always ask k_max. Rows that
    # accept more than the counts scale it up (factor > 1); the scaled value must stay under that same cap.
    from specrl.engine.adaptive.acceptance import AcceptanceStats
    strategy = AdaptiveStrategy(["suffix"], {"suffix"}, 4, flat_cost(["suffix"]))
    teach(strategy, "suffix", 4, rows=100_000)  # every position at MAX_ALPHA: expected(4) = most(4) < 4
    rows = seqs(2)
    for _ in range(PLAN_EVERY + 1):  # the rows accept every draft, above what the counts expect
        strategy.schedule(rows)
        strategy.update(StepResult("spec", rows, tokens_in=10, emitted_tokens=10, drafters_asked=["suffix"] * 2,
                                   asked=[4, 4], lengths=[4, 4], accepted=[4, 4]))
    strategy.schedule(rows)
    assert strategy._row_factor["suffix"] > 1.0
    assert strategy._expected(("suffix", ALL), 4, False) == pytest.approx(AcceptanceStats.most(4))
    assert AcceptanceStats.most(4) < 4


def run_auto(spec, prompts, params, state=None):
    llm = LLM(tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=64), spec=spec, max_num_seqs=8)
    if state is not None:
        llm.load_drafter_state(state)
    outs = llm.generate(prompts, params)
    return [o.token_ids for r in outs for o in r.outputs], llm


def flat_profile(tmp_path, names=("suffix", "ngram")):
    """A saved cost model under which drafting pays even at low acceptance (a random tiny policy)."""
    path = tmp_path / "flat.json"
    path.write_text(json.dumps(flat_cost(list(names)).state_dict()))
    return str(path)


def test_deterministic_mode_repeats_token_for_token_and_its_state_resumes_exactly(tmp_path):
    spec = SpecConfig(method="auto", drafters=("suffix", "ngram"), ngram_min=1, adaptive_mode="deterministic",
                      cost_profile=flat_profile(tmp_path))
    prompts = [[0, 5, 6, 5, 6, 5], [0, 9, 9, 9]]
    params = SamplingParams(n=3, temperature=1.0, max_tokens=30, seed=11)
    a, llm_a = run_auto(spec, prompts, params)
    b, _ = run_auto(spec, prompts, params)
    assert a == b and llm_a.stats["draft_tokens"] > 0
    # resume: the second batch after loading the first engine's state equals the second batch of one engine
    state = llm_a.drafter_state()
    stats = {tuple(key): sub for key, sub in state["strategy"]["stats"]}
    assert stats["suffix", "all"]["reached"][0] > 0 and "cost" in state["strategy"]
    second = SamplingParams(n=3, temperature=1.0, max_tokens=30, seed=12)
    straight = [o.token_ids for r in llm_a.generate(prompts, second) for o in r.outputs]
    resumed, _ = run_auto(spec, prompts, second, state=state)
    assert resumed == straight


def test_measured_mode_learns_from_its_own_steps_and_stays_exact():
    model = tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=64)
    prompts = [[0] + [(7 * i + j) % 30 + 2 for j in range(3 + i)] for i in range(6)]
    params = SamplingParams(temperature=0.0, max_tokens=30)
    base = LLM(model, max_num_seqs=8).generate(prompts, params)
    llm = LLM(model, spec=SpecConfig(method="auto", drafters=("suffix", "ngram"), ngram_min=1), max_num_seqs=8)
    got = llm.generate(prompts, params)
    assert [r.outputs[0].token_ids for r in got] == [r.outputs[0].token_ids for r in base]
    cost = llm.engine.strategy.cost
    assert cost.target.n > 5 and cost.scaled  # fit on this engine's own step timings
    assert llm.drafter_state()["strategy"]["cost"]["target"]["n"] == cost.target.n  # kept in checkpoints


def test_a_step_result_reaches_the_stats_the_trace_and_the_strategy_once(tmp_path):
    trace = tmp_path / "trace.jsonl"
    llm = LLM(tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=64), trace_path=str(trace),
              spec=SpecConfig(method="auto", drafters=("suffix", "ngram"), ngram_min=1, adaptive_mode="deterministic"))
    llm.generate([[0, 5, 6, 5, 6, 5]] * 3, SamplingParams(temperature=0.0, max_tokens=20))
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert rows[0]["phase"] == "prefill" and {r["phase"] for r in rows[1:]} == {"spec"}
    assert sum(r["emitted_tokens"] for r in rows) == llm.stats["generated_tokens"] == 60
    assert sum(r["draft_tokens"] for r in rows) == llm.stats["draft_tokens"]
    assert llm.engine.strategy.stats["suffix", ALL].rows + llm.engine.strategy.stats["ngram", ALL].rows > 0


def test_bench_adaptive_refuses_bad_draft_lengths_and_methods(capsys):
    from specrl.cli.main import main
    assert main(["bench", "adaptive", "--ks", "0,4"]) == 2
    assert "--ks '0,4' is invalid" in capsys.readouterr().err
    assert main(["bench", "adaptive", "--methods", "medusa"]) == 2
    assert "'medusa' is not a drafter" in capsys.readouterr().err
    for bench in ("adaptive", "spec"):  # one argparse type for both benches' --repeats
        assert main(["bench", bench, "--repeats", "0"]) == 2
        assert "argument --repeats: 0 is below 1: give at least 1" in capsys.readouterr().err


def test_bench_adaptive_defaults_to_what_specrl_train_runs(capsys, keep_threads):
    """Left out, the threads and the draft lengths are `specrl train`'s: torch's default thread count (not
    the free cores, which follow the load) and powers of two up to train's k, auto drafting up to that k;
    each row carries its tokens and seconds, so runs at several policies can be pooled; a row measures at least
    MIN_PROMPTS prompts (batch 2: 4 batches)."""
    import torch

    from specrl.cli.main import main
    from specrl.config.run import TrainConfig
    torch.set_num_threads(1)  # as torch's default here would be; the bench must keep it, whatever the load
    from specrl.bench.adaptive import MIN_PROMPTS
    assert main(["bench", "adaptive", "--batch-sizes", "2", "--methods", "ngram", "--max-tokens", "6",
                 "--warmup-tokens", "2", "--png", ""]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    k = TrainConfig().rollout.spec.num_speculative_tokens
    assert [(r["strategy"], r["k"]) for r in rows] == [("off", 0), *[("ngram", 2 ** i) for i in range(k.bit_length())],
                                                         ("auto", k)]
    assert {r["threads"] for r in rows} == {1} and torch.get_num_threads() == 1
    for r in rows:
        assert r["tokens"] == MIN_PROMPTS * 6 and abs(r["tokens"] / r["seconds"] - r["tokens_per_s"]) < 1e-3 * r["tokens_per_s"]


def test_hybrid_plans_and_a_deferred_model_drafter_keep_greedy_tokens_and_logprobs(tmp_path):
    from tests.drafters.factories import make
    model, eagle = make("eagle3", tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=64), tmp_path)
    prompts = [[0, 5, 6, 5, 6, 5], [0, 9, 9, 9], [0, 3, 4, 3, 4]]
    params = SamplingParams(temperature=0.0, max_tokens=24, logprobs=0)
    base = LLM(model, max_num_seqs=4).generate(prompts, params)
    spec = SpecConfig(method="auto", drafters=("suffix", "eagle3"), ngram_min=1, draft_model=eagle.draft_model,
                      num_speculative_tokens=4)
    llm = LLM(model, spec=spec, max_num_seqs=4)
    assert isinstance(llm.drafter.drafters["eagle3"], Deferred)  # idle, it catches up only when asked to draft
    llm.engine.strategy.arms = [Arm("eagle3", 4, "suffix"), Arm("eagle3", 2, "suffix")]  # only hybrids
    choices = llm.record_choices(history=True)  # off by default: the engine records choices only when asked
    got = llm.generate(prompts, params)
    arms = {h["arm"] for h in choices.history}
    assert arms and arms <= {"suffix+eagle3@4", "suffix+eagle3@2"}
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in base]
    for g, b in zip(got, base):
        assert g.outputs[0].logprobs == pytest.approx(b.outputs[0].logprobs, abs=1e-5)
    chosen = choices.rows  # telemetry: the engine's, not the strategy's
    assert chosen.get("suffix", 0) > 0 and chosen.get("eagle3", 0) > 0  # rows of both drafters
    strategy = llm.engine.strategy
    learnt = strategy.stats["suffix", ALL].rows
    choices.reset()  # what `bench adaptive` does after its warm-up
    assert choices.rows == {} and choices.history == []  # still logging, afresh
    assert strategy.stats["suffix", ALL].rows == learnt > 0
