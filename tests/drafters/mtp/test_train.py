"""Offline MTP training: the modules train with the frozen policy or alone, save and plug into the engine."""
import json

import pytest
import torch
from safetensors.torch import load_file

from specrl.drafters.mtp import train as train_mtp
from specrl.drafters.mtp.train import MTPOptions
from specrl.model import load_model
from tests.drafters.draft_model.test_train import ARGS, data
from tests.drafters.factories import assert_drafts_when_served
from tests.helpers import save_tiny


def test_mtp_trains_with_policy_and_alone(tmp_path):
    policy = save_tiny(tmp_path / "policy", vocab=32, layers=2)
    before = load_model(policy).state_dict()
    out = train_mtp.train(policy, tmp_path / "full", data(), ARGS, MTPOptions(num_modules=2, mtp_depths=3, mtp_only=False))
    assert out["num_modules"] == 2 and out["final_loss"] < out["first_loss"]
    full = load_model(tmp_path / "full")
    assert full.mtp is not None and full.mtp.depth == 2
    for name, v in before.items():  # the policy itself is frozen and stored unchanged
        assert torch.equal(full.state_dict()[name], v), name
    train_mtp.train(policy, tmp_path / "only", data(), ARGS, MTPOptions(num_modules=1, mtp_depths=2))
    assert json.loads((tmp_path / "only" / "config.json").read_text())["num_nextn_predict_layers"] == 1
    assert all(k.startswith("mtp.") for k in load_file(str(tmp_path / "only" / "mtp.safetensors")))
    assert_drafts_when_served(load_model(policy), "mtp", tmp_path / "only", k=2)


def test_bad_options():
    with pytest.raises(ValueError, match=r"num_modules=3 is invalid: expected in \[1, mtp_depths=2\]"):
        MTPOptions(num_modules=3, mtp_depths=2)
