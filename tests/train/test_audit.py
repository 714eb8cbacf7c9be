"""The sampler audit in the trainer: the engine's sampling distribution rebuilt from the trainer's logits, the
update's own logits reused (skipped rows scored by a forward without gradients), and the metrics row."""
from __future__ import annotations

import copy

import pytest
import torch

from specrl import LLM, SamplingParams
from specrl.engine.sampling import target_probs
from specrl.pipeline.learner import LocalLearner
from specrl.rl.audit import step_test
from specrl.train.audit import AuditRequest, AuditRows, TokenScorer, group_rows, score_completions
from specrl.train.config import AlgorithmConfig, OptimConfig
from specrl.train.trainer import PolicyTrainer, collate
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


@pytest.mark.parametrize("micro", [32, 2])
def test_trainer_audit_matches_a_separate_scoring(micro):
    model = tiny_model(seed=1)
    ps, cs, batch = _rollouts(model)
    scorer = TokenScorer(1.0, seed=5)
    rows = group_rows([0, 1], 4, batch.num_rows)  # group 0 skipped by the update, group 1 learning
    expect = step_test(score_completions(copy.deepcopy(model), scorer, ps[:8], cs[:8]))
    m = _trainer(model, micro).step(batch, audit=AuditRequest(scorer, rows))
    assert m["update_rows"] == pytest.approx(4 / 12)
    assert m["sampler_tokens"] == expect.tokens and m["sampler_z"] == pytest.approx(expect.z, abs=1e-5)
    assert 0 < m["sampler_p"] <= 1 and m["sampler_impossible"] == 0


def test_no_audit_no_sampler_metrics():
    model = tiny_model(seed=1)
    assert "sampler_p" not in _trainer(model).step(_rollouts(model)[2])


def test_rows_are_scored_under_the_version_that_sampled_them():
    model = tiny_model(seed=2)
    learner = LocalLearner(model, _trainer(model), version=3)
    rows = torch.ones(4, dtype=torch.bool)
    assert learner.audit_request(AuditRows(rows, 3)) is None  # audit off: no scorer
    learner.scorer = TokenScorer(1.0)
    assert learner.audit_request(AuditRows(rows, 3)).model is None  # on-policy: the trainer's own logits
    assert learner.audit_request(AuditRows(rows, 2)) is None  # no previous version kept (sync)
    assert learner.audit_request(AuditRows(rows, None)) is None  # several versions (updates in flight)
    learner._previous = tiny_model(seed=9)
    learner.audit_request(AuditRows(rows, 3))  # keeps version 3 for the next step
    learner.version = 4
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    req = learner.audit_request(AuditRows(rows, 3))
    assert req.model is learner._previous
    assert not torch.equal(next(req.model.parameters()), next(model.parameters()))
    assert learner.audit_request(AuditRows(rows, 1)) is None  # two versions behind: not audited
