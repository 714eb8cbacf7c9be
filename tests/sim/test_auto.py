"""`auto` in the simulator: the adaptive engine's own rule (AdaptiveStrategy.best_arm) over the simulator's costs."""
import json

import numpy as np
import pytest

from specrl.engine.adaptive.arms import ALL, FILL, FULL
from specrl.sim.acceptance import geometric
from specrl.sim.auto import AutoPolicy, PoolDrafter, counts_from_model, over_one
from specrl.sim.des import Engine, SDSetting, simulate_replica
from tests.sim.helpers import toy_hw


def _run(engine, policy, lengths, slots):
    sd = SDSetting(geometric(0.5, policy.k_max), 0.0, auto=policy)
    return simulate_replica(engine, np.asarray(lengths), 8, slots, sd, np.random.default_rng(0)), sd


def test_a_large_batch_still_drafts_where_verifying_is_free(tiny):
    # memory-bound machine (no compute limit): a forward costs its weight bytes whatever its tokens, so a verify
    # of k+1 tokens per row costs what a decode does. Drafts accepted at 0.8 a position, k 4: at 64 rows drafting
    # gives 64 x 3.36 tokens for 1.4 forwards (drafter 0.1 a token), against 64 for one. The rule TLT used (and the
    # engine dropped) turns SD off above 32 running rows; the cost model keeps it on.
    hw = toy_hw(bw=1e6, flops=1e30)
    engine = Engine(hw, tiny)
    policy = over_one(hw, geometric(0.8, 4), draft_frac=0.1)
    tr, _ = _run(engine, policy, [200] * 64, 64)
    bulk = tr.active > 32
    bulk[0] = False  # iteration 0 only prefills
    assert bulk.sum() > 10 and (tr.spec[bulk]).all()  # every decoding iteration above 32 rows drafted
    assert tr.emitted.sum() == 64 * 200
    assert policy.stepper(hw, tiny, 1).arm(64, 100.0).k == 4


def test_a_compute_bound_batch_stops_drafting_and_its_tail_drafts(tiny):
    # compute-bound machine: a token through the policy costs ~1 s (tiny's ~90k multiply-adds at 1.8e5 FLOP/s)
    # beside a fixed 4 s a step. Drafts accepted at 0.5, drafting free. At 64 rows, SD off makes 64 tokens in
    # ~68 s (0.94/s) and k 1 makes 96 in ~132 s (0.73/s): off. At 1 row, off makes 1 token in 5 s (0.2/s) and
    # k 1 makes 1.5 in 6 s (0.25/s): draft. So the bulk decodes plainly and the tail drafts.
    hw = toy_hw(bw=1e30, flops=1.8e5, iter_s=4.0)
    engine = Engine(hw, tiny)
    policy = over_one(hw, geometric(0.5, 4), draft_frac=0.0)
    step = policy.stepper(hw, tiny, 1)
    assert step.arm(64, 50.0).drafter is None
    assert step.arm(1, 50.0).k > 0
    tr, _ = _run(engine, policy, [20] * 63 + [300], 64)
    assert not tr.spec[tr.active > 32].any()
    assert tr.spec[tr.active == 1].all()


def test_a_hybrid_gives_each_row_its_own_drafter(tiny):
    # suffix proposes a full-length draft for half the rows, accepted at 0.95 a position, and little elsewhere;
    # eagle3 accepts 0.7 everywhere but costs 0.2 of a forward a token. Memory-bound, 8 rows, k 4: suffix alone
    # expects 1 + 0.43 tokens a row for one forward, eagle3 alone 2.77 for 1.8, the hybrid (suffix's full matches
    # first, eagle3 the other rows) 1 + (3.52 + 1.77) / 2 = 3.65 for about 1.8 forwards: the hybrid.
    hw = toy_hw(bw=1e6, flops=1e30)
    suffix_all = counts_from_model(geometric(0.3, 4), 4)
    suffix_all["proposed"] = [0.5 * a for a in suffix_all["asked"]]
    stats = {("suffix", ALL): suffix_all, ("suffix", FULL): counts_from_model(geometric(0.95, 4), 4),
             ("eagle3", ALL): counts_from_model(geometric(0.7, 4), 4),
             ("eagle3", FILL): counts_from_model(geometric(0.7, 4), 4)}
    pool = {"suffix": PoolDrafter(hw, 0.0, point=True), "eagle3": PoolDrafter(hw, 0.2, point=False)}
    policy = AutoPolicy(pool, stats, 4)
    step = policy.stepper(hw, tiny, 1)
    arm = step.arm(8, 100.0)
    assert (arm.lead, arm.drafter, arm.k) == ("suffix", "eagle3", 4)
    accepted, q, k, seconds = step.step(8, 8, 100.0, np.random.default_rng(0))
    assert (q, k) == (5.0, 4) and accepted.shape == (8,)
    # the lead drafts every row (free), eagle3 the rows without a full match
    one_row = step.cost.draft_s("eagle3", 4, 4)
    assert 0.0 < seconds <= 8 * one_row + 1e-12


def test_auto_needs_counts_for_every_drafter(tiny):
    hw = toy_hw()
    with pytest.raises(ValueError, match=r"auto's drafters \['eagle3'\] have no acceptance counts"):
        AutoPolicy({"eagle3": PoolDrafter(hw, 0.1, point=False)}, {}, 4)
    with pytest.raises(ValueError, match="at least one drafter"):
        AutoPolicy({}, {}, 4)


def test_the_cli_models_auto_and_names_the_removed_threshold(capsys):
    from specrl.sim.cli import main
    with pytest.raises(ValueError, match="no longer turns SD off above a fixed batch size: pass --method auto"):
        main(["step", "--adaptive-max-batch", "32"])
    args = ["step", "--method", "auto", "--auto-drafters", "eagle3,suffix", "--gpus", "2", "--num-prompts", "4",
            "--n", "4", "--lengths", "lognormal:300,0.5", "--max-tokens", "1000", "--k", "4"]
    assert main(args) == 0
    assert '"rollout_speedup"' in capsys.readouterr().out
    with pytest.raises(ValueError, match=r"--auto-drafters \['auto'\] invalid"):
        main([*args[:3], "--auto-drafters", "auto"])


def test_choices_prints_the_rule_per_running_count(capsys):
    from specrl.sim.cli import main
    with pytest.raises(ValueError, match="pass --method auto"):
        main(["choices", "--method", "eagle3"])
    assert main(["choices", "--method", "auto", "--k", "4", "--rows", "1", "64"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["running"] for r in rows] == [1, 64] and all(r["kind"] == "choice" for r in rows)
    # H100, Qwen3-8B, EAGLE-3 at acceptance length 3: verifying is nearly free at either count, so it drafts
    assert all(r["drafter"] == "eagle3" and r["k"] > 0 for r in rows)


def test_counts_of_a_drafter_that_matches_on_a_share_of_its_rows():
    # a model-free drafter matching on 10% of its rows, its proposals accepted at 0.8 a position, k 4: the engine's
    # counts expect 0.1 x (0.8 + 0.64 + 0.512 + 0.4096) = 0.236 accepted drafts a row, and a full-length share 0.1
    from specrl.engine.adaptive.acceptance import AcceptanceStats
    stats = AcceptanceStats(4)
    stats.load_state_dict(counts_from_model(geometric(0.8, 4), 4, share=0.1))
    assert stats.expected(4, optimistic=False) == pytest.approx(0.23616, rel=1e-4)
    assert stats.full_share(4) == pytest.approx(0.1, rel=1e-4)
