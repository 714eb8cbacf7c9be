"""The sampler audit on the learner's side: the engine's sampling distribution rebuilt from the trainer's logits,
the update's own logits shown to the hook (skipped rows by a forward without gradients), the metrics row, and
rows scored under the version that sampled them."""
from __future__ import annotations

import copy

import pytest
import torch

from specrl import LLM, SamplingParams
from specrl.engine.sampler import target_probs
from specrl.audit import AuditRows, LearnerAudit, StepAudit, TokenScorer, group_rows, score_completions, step_evidence
from specrl.audit.learner import FIRST_TOKENS, ForwardBudget, cut_rows
from specrl.pipeline.learner import LocalLearner
from specrl.config.run import AlgorithmConfig, OptimConfig
from specrl.trainer.trainer import PolicyTrainer, collate
from tests.helpers import tiny_model


def _trainer(model, micro=32):
    return PolicyTrainer(model, AlgorithmConfig(), OptimConfig(lr=1e-2, warmup_steps=0, micro_batch_size=micro),
                         total_steps=10, temperature=1.0, norm_len=8)


def _rollouts(model, n=4):
    llm = LLM(copy.deepcopy(model), max_num_seqs=16, kv_cache_memory="8MiB")
    prompts = [[3, 4, 5], [6, 7], [8, 9, 10, 11]]
    outs = llm.generate(prompts, SamplingParams(n=n, temperature=1.0, max_tokens=8, seed=1))
    samples = [(r.prompt_token_ids, c) for r in outs for c in r.outputs]
    adv = torch.tensor([0.0] * n + [1.0, -1.0] * (n // 2) + [0.0] * n)  # groups 0 and 2 are skipped by the update
    ps, cs = [p for p, _ in samples], [c.token_ids for _, c in samples]
    return ps, cs, collate(ps, cs, [c.logprobs for _, c in samples], adv, pad_id=0)


def test_scorer_applies_temperature_top_p_top_k_as_the_engine():
    logits = torch.randn(6, 32, generator=torch.Generator().manual_seed(0)) * 3  # [n, V]
    scorer = TokenScorer(0.7, top_p=0.8, top_k=5, seed=3)
    expect = target_probs(logits[None], torch.tensor([0.7]), torch.tensor([5]), torch.tensor([0.8]))[0]
    assert torch.equal(scorer.probs(logits), expect)
    outside = expect.argmin(-1)  # a token outside the top-k: no mass
    s = scorer(logits, outside, torch.zeros(6, dtype=torch.long), torch.arange(6))
    assert s[:, 2].tolist() == [1.0] * 6
    again = scorer(logits, outside, torch.zeros(6, dtype=torch.long), torch.arange(6))
    assert torch.equal(s, again)  # the audit's uniforms are a function of (seed, row, position)


def _step(trainer, batch, hook=None):
    trainer.logits_hook = hook
    try:
        m = trainer.step(batch)
    finally:
        trainer.logits_hook = None
    return {**m, **hook.metrics()} if hook is not None else m


@pytest.mark.parametrize("micro, updates", [(32, 1), (2, 1), (32, 2)])
def test_trainer_audit_matches_a_separate_scoring(micro, updates):
    model = tiny_model(seed=1)
    ps, cs, batch = _rollouts(model)
    scorer = TokenScorer(1.0, seed=5)
    rows = group_rows([0, 1], 4, batch.num_rows)  # group 0 skipped by the update, group 1 learning
    expect = step_evidence(score_completions(copy.deepcopy(model), scorer, ps[:8], cs[:8]))
    trainer = _trainer(model, micro)
    trainer.algo.updates_per_step = updates
    m = _step(trainer, batch, StepAudit(scorer, rows, batch.mask))
    if updates == 1:
        assert m["update_rows"] == pytest.approx(4 / 12)
    assert m["sampler_tokens"] == expect.tokens and m["sampler_z"] == pytest.approx(expect.z, abs=1e-5)
    assert m["sampler_bets"] == pytest.approx(expect.log_bets, abs=1e-6)
    assert m["sampler_impossible"] == 0 and m["sampler_s"] > 0


class _CountingForwardHook:
    """A forward hook (what online drafter training installs) that counts the rows it was shown."""
    hidden_layers = ()

    def __init__(self):
        self.rows = 0

    def __call__(self, info):
        self.rows += len(info.rows)


def test_with_a_forward_hook_the_skipped_rows_forward_once_for_both():
    model = tiny_model(seed=1)
    ps, cs, batch = _rollouts(model)
    scorer = TokenScorer(1.0, seed=5)
    expect = step_evidence(score_completions(copy.deepcopy(model), scorer, ps, cs))
    trainer = _trainer(model)
    trainer.forward_hook = counting = _CountingForwardHook()
    m = _step(trainer, batch, StepAudit(scorer, torch.ones(batch.num_rows, dtype=torch.bool), batch.mask))
    assert counting.rows == batch.num_rows  # 4 learning rows, 8 skipped ones: each row's forward once
    assert m["sampler_tokens"] == expect.tokens and m["sampler_bets"] == pytest.approx(expect.log_bets, abs=1e-6)


def test_no_audit_no_sampler_metrics():
    model = tiny_model(seed=1)
    assert not any(k.startswith("sampler_") for k in _trainer(model).step(_rollouts(model)[2]))


def test_rows_are_scored_under_the_version_that_sampled_them():
    model = tiny_model(seed=2)
    ps, cs, batch = _rollouts(model)
    learner = LocalLearner(model, _trainer(model), version=3)
    rows = group_rows([1], 4, batch.num_rows)
    audit = LearnerAudit(TokenScorer(1.0), share=1.0)  # a budget that cuts nothing (the cut: tests below)

    def begin(version):
        return audit.begin(learner.trainer, model, learner.version, batch, AuditRows(rows, version))
    assert begin(3).on_policy  # on-policy: the trainer's own logits, through its hook
    assert begin(2) is None  # no previous version kept (sync)
    assert begin(None) is None  # several versions (updates in flight)
    audit.previous = tiny_model(seed=9)
    begin(3)  # keeps version 3 for the next step
    before = copy.deepcopy(model)
    learner.version = 4
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    step = begin(3)
    assert not step.on_policy and step.metrics()["sampler_tokens"] == int(batch.mask[rows].sum())
    expect = step_evidence(score_completions(before, audit.scorer, ps[4:8], cs[4:8]))
    assert step.metrics()["sampler_bets"] == pytest.approx(expect.log_bets, abs=1e-6)  # under version 3's weights
    assert begin(1) is None  # two versions behind: not audited


def test_the_learner_reports_the_audit_in_its_step_metrics():
    model = tiny_model(seed=3)
    batch = _rollouts(model)[2]
    learner = LocalLearner(model, _trainer(model), version=0)
    learner.audit = LearnerAudit(TokenScorer(1.0))
    m = learner.step(batch, audit=AuditRows(group_rows([0], 4, batch.num_rows), 0))
    assert m["sampler_tokens"] == int(batch.mask[:4].sum()) and len(m["sampler_bets"]) > 0
    assert m["sampler_rows"] == 4 and 0 <= m["sampler_score_s"] <= m["sampler_s"]
    assert learner.trainer.logits_hook is None  # installed for the step only


def test_by_default_every_row_is_audited_the_skipped_ones_too():
    # groups 0 and 2 have zero advantages: the update skips them, a forward without gradients scores them
    from specrl.config.rollout import RolloutConfig
    from specrl.pipeline.steps import audit_rows
    from types import SimpleNamespace
    assert RolloutConfig().audit_groups is None
    cfg = SimpleNamespace(rollout=RolloutConfig(n=4), seed=0)
    rollout = SimpleNamespace(step=0, outputs=[None] * 3, version=0, newest_version=0)
    rows = audit_rows(rollout, cfg, 12)
    assert bool(rows.rows.all())
    model = tiny_model(seed=3)
    batch = _rollouts(model)[2]
    learner = LocalLearner(model, _trainer(model), version=0)
    learner.audit = LearnerAudit(TokenScorer(1.0))
    m = learner.step(batch, audit=rows)
    assert m["sampler_rows"] == 12 and m["sampler_tokens"] == int(batch.mask.sum())


@pytest.mark.parametrize("packing", [False, True])
def test_a_forward_for_the_audit_alone_runs_the_lm_head_at_its_response_tokens_only(packing):
    # the skipped rows' forward: the decoder over every position, the lm-head only where the hook reads
    model = tiny_model(seed=3)
    batch = _rollouts(model)[2]
    trainer = PolicyTrainer(model, AlgorithmConfig(), OptimConfig(lr=1e-2, warmup_steps=0, packing=packing),
                            total_steps=10, temperature=1.0, norm_len=8)
    rows = torch.zeros(batch.num_rows, dtype=torch.bool)
    rows[[0, 5]] = True
    audit = StepAudit(TokenScorer(1.0), rows, batch.mask)
    heads = []
    handle = model.lm_head.register_forward_hook(lambda m, inp, out: heads.append(inp[0].numel() // inp[0].shape[-1]))
    trainer.show(model, batch, torch.arange(batch.num_rows), audit)
    handle.remove()
    assert sum(heads) == int(batch.mask[rows].sum())
    expect = StepAudit(TokenScorer(1.0), rows, batch.mask)
    trainer.score(model, batch, torch.arange(batch.num_rows), expect)  # the logprobs' forward shows the same
    torch.testing.assert_close(audit.scores, expect.scores)


def test_cut_rows_shares_the_budget_in_row_order():
    lengths = [10, 30, 8, 30]  # forward positions per row; responses start at position 4
    mask = torch.zeros(4, 30)
    for r, n in enumerate(lengths):
        mask[r, 4:n] = 1.0
    batch = collate([[1] * 5] * 4, [[2] * (n - 4) for n in lengths], [[0.0] * (n - 4) for n in lengths],
                    torch.zeros(4), pad_id=0)
    assert batch.mask.equal(mask)
    rows = torch.tensor([True, True, False, True])
    cut, keep = cut_rows(batch, rows, tokens=40)  # row 0 whole (10), row 1 the 30 left, row 3 nothing left
    assert cut.lengths.tolist() == [10, 30, 8, 30] and keep.tolist() == [True, True, False, False]
    assert cut.mask.sum(-1).tolist() == [6, 26, 4, 26]  # row 2, not audited, is left as it was
    cut, keep = cut_rows(batch, rows, tokens=8)  # 8 < row 0's 10: cut after 3 response tokens; then nothing left
    assert keep.tolist() == [True, False, False, False] and cut.lengths.tolist() == [8, 30, 8, 30]
    cut, keep = cut_rows(batch, rows, tokens=4)  # no response token in row 0's share: dropped, and so the rest
    assert not keep.any()
    cut, keep = cut_rows(batch, rows, tokens=10_000)  # room for all: nothing cut
    assert cut.lengths.equal(batch.lengths) and cut.mask.equal(batch.mask) and keep.equal(rows)


def test_the_budget_is_a_share_of_the_previous_update():
    budget = ForwardBudget(share=0.03)
    assert budget.tokens() == FIRST_TOKENS  # no update seen yet
    batch = collate([[1] * 5] * 3, [[2] * 45, [2] * 95, [2] * 5], [[0.0] * 45, [0.0] * 95, [0.0] * 5],
                    torch.tensor([1.0, -1.0, 0.0]), pad_id=0)
    budget.record(batch)  # the update forwards rows 0 and 1 (row 2 has no advantage): 49 + 99 positions
    assert budget.update_tokens == 148 and budget.tokens() == int(0.03 * 3 * 148)


def test_rows_of_the_version_before_are_cut_to_the_budget_and_scored_as_cut():
    model = tiny_model(seed=4)
    ps, cs, batch = _rollouts(model, n=4)
    rows = group_rows([0, 1], 4, batch.num_rows)
    audit = LearnerAudit(TokenScorer(1.0, seed=2), previous=tiny_model(seed=9))
    trainer = _trainer(model)
    audit.begin(trainer, model, 0, batch, None)  # keeps version 0
    audit.budget.share = 24 / (3 * int(batch.lengths[batch.advantages != 0].sum()))  # room for 24 positions
    step = audit.begin(trainer, model, 1, batch, AuditRows(rows, 0))
    assert not step.on_policy
    cut, keep = cut_rows(batch, rows, 24)
    assert step.rows.equal(keep) and step.mask.equal(cut.mask)
    kept = keep.nonzero()[:, 0].tolist()
    n = [int(cut.lengths[r]) - len(ps[r]) + 1 for r in kept]  # response tokens of each cut row
    expect = step_evidence(score_completions(model, audit.scorer, [ps[r] for r in kept],
                                             [cs[r][:k] for r, k in zip(kept, n)]))
    got = step.metrics()
    assert got["sampler_tokens"] == expect.tokens == sum(n) and got["sampler_tokens"] < int(batch.mask[rows].sum())
    assert got["sampler_bets"] == pytest.approx(expect.log_bets, abs=1e-6)  # under version 0's weights, cut


def test_the_audit_share_comes_from_the_config_and_a_bad_one_is_one_line():
    from specrl.config import ConfigError
    from specrl.config.rollout import RolloutConfig
    audit = LearnerAudit.build(RolloutConfig(audit_share=0.05), seed=0, keep_previous=False)
    assert audit.budget.share == 0.05
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ConfigError, match="audit_share") as e:
            RolloutConfig(audit_share=bad).validate()
        assert "\n" not in str(e.value) and "set rollout.audit_share=0.03" in str(e.value)
