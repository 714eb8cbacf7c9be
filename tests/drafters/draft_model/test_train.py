"""Offline draft-model training: the student trains, saves atomically and plugs into the engine."""
import random

import pytest
import torch

from specrl.drafters.draft_model import train as train_draft_model
from specrl.drafters.draft_model.train import DraftModelOptions, student_from_policy
from specrl.drafters.training.data import DrafterTrainArgs
from specrl.model import load_model
from specrl.optim import OptimSettings
from tests.drafters.factories import assert_drafts_when_served
from tests.helpers import save_tiny, tiny_model

ARGS = DrafterTrainArgs(steps=8, batch_tokens=256, optim=OptimSettings(lr=3e-3, warmup_steps=1, min_lr_ratio=0.05),
                        bf16_autocast=False, save_dtype="float32")


def data(n=12, vocab=32, seed=0):
    """(prompt, response) pairs of a fixed random 'language': each token is followed by (3 t + 1) mod vocab,
    so a drafter can learn it in a few steps."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        toks = [rng.randrange(2, vocab)]
        for _ in range(rng.randrange(8, 16)):
            toks.append(max(2, (3 * toks[-1] + 1) % vocab))
        pairs.append(([0] + toks[:3], toks[3:]))
    return pairs


def test_student_copies_evenly_spaced_policy_layers():
    # 4 policy layers -> 2 student layers: picks round(0 * 3 / 1) = 0 and round(1 * 3 / 1) = 3
    policy = tiny_model(layers=4)
    student = student_from_policy(policy, 2)
    assert torch.equal(student.model.layers[1].mlp.up_proj.weight, policy.model.layers[3].mlp.up_proj.weight)
    assert torch.equal(student.model.layers[0].mlp.up_proj.weight, policy.model.layers[0].mlp.up_proj.weight)
    assert torch.equal(student.model.embed_tokens.weight, policy.model.embed_tokens.weight)


def test_draft_model_trains_and_drafts(tmp_path):
    policy = save_tiny(tmp_path / "policy", vocab=32, layers=3)
    out = train_draft_model.train(policy, tmp_path / "draft", data(), ARGS, DraftModelOptions(num_layers=2))
    assert out["steps_done"] == 8 and out["final_loss"] < out["first_loss"]
    draft = load_model(tmp_path / "draft")
    assert draft.config.num_layers == 2 and draft.config.vocab_size == 32
    assert (tmp_path / "draft" / "tokenizer.json").is_file()
    assert_drafts_when_served(load_model(policy), "draft_model", tmp_path / "draft", k=3)


def test_bad_options():
    with pytest.raises(ValueError, match="num_layers=0"):
        DraftModelOptions(num_layers=0)
