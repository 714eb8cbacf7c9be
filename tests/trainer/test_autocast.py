"""PolicyTrainer under bf16 autocast: fp32 master weights, gradients and optimizer state; a loss close to fp32's."""
from __future__ import annotations

import copy

import pytest
import torch

from specrl import LLM, SamplingParams
from specrl.config.run import AlgorithmConfig, OptimConfig
from specrl.trainer.trainer import PolicyTrainer, collate
from tests.helpers import tiny_model


def _batch(model):
    outs = LLM(copy.deepcopy(model), max_num_seqs=8).generate(
        [[3, 4, 5], [6, 7]], SamplingParams(n=3, temperature=1.0, max_tokens=8, seed=1))
    samples = [(r.prompt_token_ids, c) for r in outs for c in r.outputs]
    return collate([p for p, _ in samples], [c.token_ids for _, c in samples], [c.logprobs for _, c in samples],
                   torch.linspace(-1, 1, len(samples)), pad_id=0)


def _step(model, batch, autocast: bool, updates: int = 1) -> tuple[PolicyTrainer, dict]:
    trainer = PolicyTrainer(model, AlgorithmConfig(updates_per_step=updates),
                            OptimConfig(lr=1e-2, warmup_steps=0, autocast=autocast), total_steps=4,
                            temperature=1.0, norm_len=8)
    return trainer, trainer.step(batch)


@pytest.mark.parametrize("updates", [1, 2])
def test_autocast_keeps_fp32_master_state_and_a_close_loss(updates):
    policy = tiny_model(seed=2, vocab=32, hidden=64)
    batch = _batch(policy)
    ref_policy = copy.deepcopy(policy)
    _, ref = _step(ref_policy, batch, autocast=False, updates=updates)
    trainer, got = _step(policy, batch, autocast=True, updates=updates)
    assert {p.dtype for p in policy.parameters()} == {torch.float32}
    state = [t for s in trainer.optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0]
    assert state and {t.dtype for t in state} == {torch.float32}  # Adam moments
    # bf16 matmuls round logits to ~3 significant digits: the gradients and the audit move by little. (The
    # loss is no check: with one update its ratio is exactly 1, so it equals -sum(A n)/sum(n) for any model.)
    ref_grads = torch.cat([p.grad.flatten() for p in ref_policy.parameters()])
    got_grads = torch.cat([p.grad.flatten() for p in policy.parameters()])
    other = tiny_model(seed=9, vocab=32, hidden=64)  # how far apart unrelated weights' gradients are
    _step(other, batch, autocast=False, updates=updates)
    other_grads = torch.cat([p.grad.flatten() for p in other.parameters()])
    gap = (got_grads - ref_grads).norm() / ref_grads.norm()
    assert gap < 0.1 < (other_grads - ref_grads).norm() / ref_grads.norm()
    assert ref["logprob_diff"] < 1e-4 < got["logprob_diff"] < 0.05
