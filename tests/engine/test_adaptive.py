"""The adaptive engine ("auto"): its cost model, its per-row decision, its bandit, its deterministic mode and
checkpointed state, and the errors of its settings. Exactness of its mixed batches: tests/drafters."""
import json

import pytest

from specrl import LLM, SamplingParams, SpecConfig
from specrl.config.build import ConfigError, from_dict
from specrl.engine.adaptive import AdaptiveStrategy, expected_accepted
from specrl.engine.cost_model import CostModel, CostProfileError
from specrl.engine.drafting import DrafterPool, pad_proposals
from specrl.engine.sequence import Sequence
from specrl.engine.sampling import SamplingParams as SP
from specrl.train.config import TrainConfig
from tests.helpers import tiny_model


def test_expected_accepted_is_the_geometric_run():
    assert expected_accepted(0.5, 1) == 0.5
    assert expected_accepted(0.5, 3) == pytest.approx(0.5 + 0.25 + 0.125)
    assert expected_accepted(1.0, 4) == 4.0 and expected_accepted(0.9, 0) == 0.0


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
    cost.to_profile(tmp_path / "p.json", device="cpu")
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
    with pytest.raises(ValueError, match=r"'auto_max_batch' was removed: .*cost model.*delete the key"):
        SpecConfig(method="auto", auto_max_batch=32)
    with pytest.raises(ValueError, match=r"'auto_methods' was removed: .*rename auto_methods to drafters"):
        SpecConfig(method="auto", auto_methods=("suffix",))
    with pytest.raises(ConfigError, match=r"config key 'rollout.spec.auto_methods' was removed: .*drafters"):
        from_dict(TrainConfig, {"rollout": {"spec": {"auto_methods": ["suffix"]}}})
    with pytest.raises(ConfigError, match=r"config key 'rollout.spec.auto_max_batch' was removed"):
        from_dict(TrainConfig, {"rollout": {"spec": {"method": "auto", "auto_max_batch": 32}}})
    with pytest.raises(ValueError, match=r"adaptive_mode='fast' is not one of \['measured', 'deterministic'\]"):
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
        self.per_row = per_row

    def observe(self, fwd):
        pass

    def propose(self, seqs, k):
        return pad_proposals([[1] * min(ki, self.per_row[s.seq_id]) for s, ki in zip(seqs, k)], "cpu")

    def release(self, seq):
        pass


def seqs(n):
    return [Sequence(i, i, 0, [0, 1, 2], SP(max_tokens=100), i, 200, slot=i) for i in range(n)]


def flat_cost(names, deterministic=True):
    """A forward costs the same whatever it verifies, drafting costs nothing: drafting always pays."""
    cost = CostModel(1000, {n: 0 for n in names}, deterministic=deterministic)
    cost.target.prior = [1.0, 1e-6, 0.0]
    return cost


def test_each_row_takes_the_drafter_its_own_results_favour():
    rows = seqs(3)
    pool = DrafterPool({"suffix": PointDrafter({0: 4, 1: 0, 2: 4}), "eagle3": PointDrafter({})})
    strategy = AdaptiveStrategy(["suffix", "eagle3"], {"suffix"}, 4, flat_cost(["suffix", "eagle3"]))
    strategy.row_acc[(0, "suffix")] = [20.0, 0.0]  # row 0 repeats itself: suffix drafts are accepted
    strategy.row_acc[(2, "suffix")] = [0.0, 10.0]  # row 2: suffix proposes but is always wrong
    strategy.row_acc[(2, "eagle3")] = [10.0, 2.0]
    strategy.rng.random = lambda: 1.0  # no exploration
    plan = strategy.schedule(rows, pool)
    # row 1 has no suffix match (nothing proposed), so the model drafter drafts for it
    assert plan.drafters == ["suffix", "eagle3", "eagle3"] and plan.k == [4, 4, 4]
    assert set(plan.ready) == {"suffix"}  # the suffix proposal is reused, not made again


def test_sd_is_off_when_a_verified_token_costs_as_much_as_a_forward():
    rows = seqs(64)
    cost = CostModel(1000, {"suffix": 0}, deterministic=True)
    cost.target.prior = [1e-6, 64.0, 0.0]  # seconds = tokens: no fixed cost left to amortise
    strategy = AdaptiveStrategy(["suffix"], {"suffix"}, 4, cost)
    strategy.rng.random = lambda: 1.0
    pool = DrafterPool({"suffix": PointDrafter({i: 4 for i in range(64)})})
    assert strategy.schedule(rows, pool) is None and strategy.last["K"] == "0"


def test_the_bandit_tries_the_arms_it_cannot_tell_apart():
    rows = seqs(2)
    cost = flat_cost(["suffix"])
    cost.target.prior = [1.0, 64 * 0.3, 0.0]  # drafting roughly breaks even: the arms score alike
    strategy = AdaptiveStrategy(["suffix"], {"suffix"}, 4, cost, seed=3)
    pool = DrafterPool({"suffix": PointDrafter({0: 4, 1: 4})})
    picked = set()
    for _ in range(40):
        strategy.schedule(rows, pool)
        picked.add(strategy.last["K"])
        strategy.last = {}
    assert len(picked) >= 2, picked


def run_auto(spec, prompts, params, state=None):
    llm = LLM(tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=64), spec=spec, max_num_seqs=8)
    if state is not None:
        llm.drafter.load_state_dict(state)
    outs = llm.generate(prompts, params)
    return [o.token_ids for r in outs for o in r.outputs], llm


def test_deterministic_mode_repeats_token_for_token_and_its_state_resumes_exactly():
    spec = SpecConfig(method="auto", drafters=("suffix", "ngram"), ngram_min=1, adaptive_mode="deterministic")
    prompts = [[0, 5, 6, 5, 6, 5], [0, 9, 9, 9]]
    params = SamplingParams(n=3, temperature=1.0, max_tokens=30, seed=11)
    a, llm_a = run_auto(spec, prompts, params)
    b, _ = run_auto(spec, prompts, params)
    assert a == b and llm_a.stats["draft_tokens"] > 0
    # resume: the second batch after loading the first engine's state equals the second batch of one engine
    state = llm_a.drafter.state_dict()
    assert state["strategy"]["arms"] and "cost" in state["strategy"]
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
    assert llm.drafter.state_dict()["strategy"]["cost"]["target"]["n"] == cost.target.n  # kept in checkpoints


def test_a_step_result_reaches_the_stats_the_trace_and_the_strategy_once(tmp_path):
    trace = tmp_path / "trace.jsonl"
    llm = LLM(tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=64), trace_path=str(trace),
              spec=SpecConfig(method="auto", drafters=("suffix", "ngram"), ngram_min=1, adaptive_mode="deterministic"))
    llm.generate([[0, 5, 6, 5, 6, 5]] * 3, SamplingParams(temperature=0.0, max_tokens=20))
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert rows[0]["phase"] == "prefill" and {r["phase"] for r in rows[1:]} == {"spec"}
    assert sum(r["emitted_tokens"] for r in rows) == llm.stats["generated_tokens"] == 60
    assert sum(r["draft_tokens"] for r in rows) == llm.stats["draft_tokens"]
    assert sum(llm.engine.strategy.acc["suffix"]) + sum(llm.engine.strategy.acc["ngram"]) > 0


def test_bench_adaptive_refuses_bad_draft_lengths_and_methods(capsys):
    from specrl.cli.main import main
    assert main(["bench", "adaptive", "--ks", "0,4"]) == 2
    assert "--ks '0,4' is invalid" in capsys.readouterr().err
    assert main(["bench", "adaptive", "--methods", "medusa"]) == 2
    assert "'medusa' is not a drafter" in capsys.readouterr().err
