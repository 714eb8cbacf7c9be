import json

import pytest
import torch

from specrl.model import load_model
from specrl.tasks.arith import make_problems
from specrl.tasks.pretrain import PretrainConfig, Stage, accuracy, collate, encode_problem, pretrain, stage_optim
from specrl.tasks.tokenizer import build_tokenizer, special_ids
from tests.helpers import tiny_model

TINY = dict(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16, intermediate_size=64,
            batch_tokens=512, eval_problems=8, eval_max_new_tokens=12, max_position_embeddings=512, grow=False,
            eval_task="arith")


def stages(steps: int) -> tuple[Stage, ...]:
    """Two short stages: plain short chains, then both styles."""
    return (Stage("a", steps=steps, optim=stage_optim(1e-3)), Stage("b", steps=steps, optim=stage_optim(1e-3),
                                                                    counted_share=0.5))


def test_collate_masks_prompt_and_padding():
    # rows "<bos>ab|c<eos>" (prompt length 3) and "<bos>a|b<eos>" (prompt length 2), pad id 0
    batch = collate([([1, 5, 6, 7, 2], 3), ([1, 5, 6, 2], 2)], pad_id=0)
    assert batch.input_ids.tolist() == [[1, 5, 6, 7, 2], [1, 5, 6, 2, 0]]
    # loss on the response and EOS only: position t predicts token t+1
    assert batch.targets.tolist() == [[-100, -100, 7, 2, -100], [-100, 6, 2, -100, -100]]
    tok = build_tokenizer()  # and on encoded problems of different lengths: loss on each response and EOS only
    ids = special_ids(tok)
    rows = [encode_problem(tok, ids, p) for p in make_problems(4, seed=1)]
    batch = collate(rows, ids.pad)
    for b, (seq, prompt_len) in enumerate(rows):
        taken = (batch.targets[b] != -100).nonzero().flatten().tolist()
        assert taken == list(range(prompt_len - 1, len(seq) - 1))
        assert batch.targets[b, taken].tolist() == seq[prompt_len:] == batch.input_ids[b, 1:len(seq)][taken].tolist()
        assert (batch.input_ids[b, len(seq):] == ids.pad).all()


def test_encode_problem_layout():
    tok = build_tokenizer()
    ids = special_ids(tok)
    p = make_problems(1, seed=0)[0]
    seq, prompt_len = encode_problem(tok, ids, p)
    assert seq[0] == ids.bos and seq[-1] == ids.eos
    assert tok.decode(seq[1:prompt_len]) == p.prompt
    assert tok.decode(seq[prompt_len:-1]) == p.response


def test_renamed_stage_and_recipe_keys_name_the_new_ones():
    from specrl.config import ConfigError, from_dict
    stage = {"name": "s", "steps": 10, "optim": {"lr": 1e-3}}
    with pytest.raises(ConfigError, match="'lr' was replaced by 'optim.lr'"):
        from_dict(Stage, {**stage, "lr": 1e-3})
    for old, new in (("ops_median", "hops_median"), ("ops_sigma", "hops_sigma"), ("max_ops", "max_hops")):
        with pytest.raises(ConfigError, match=f"'{old}' was replaced by '{new}'"):
            from_dict(Stage, {**stage, old: 3})
    with pytest.raises(ConfigError, match="'grad_clip' was replaced by 'stages.NAME.optim.grad_clip'"):
        from_dict(PretrainConfig, {"grad_clip": 0.5})
    assert from_dict(Stage, {**stage, "max_hops": 30}).spec().max_hops == 30


def test_engine_accuracy_scores_the_completions_it_returns():
    tok = build_tokenizer()
    model = tiny_model(seed=1, vocab=tok.get_vocab_size(), max_pos=128)
    problems = make_problems(6, seed=0, split="test")
    acc, texts = accuracy(model, tok, problems, max_new_tokens=8, temperature=0.0)
    assert len(texts) == 6 and acc == 0.0  # an untrained model writes no worked solution
    again = accuracy(model, tok, problems, max_new_tokens=8, temperature=1.0, seed=3)[1]
    assert again == accuracy(model, tok, problems, max_new_tokens=8, temperature=1.0, seed=3)[1]


def test_pretrain_smoke_writes_a_loadable_checkpoint(tmp_path):
    cfg = PretrainConfig(stages=stages(2), time_budget_s=60, **TINY)
    record = pretrain(tmp_path / "policy", cfg)
    assert record["steps_done"] == 4 and [st["steps_done"] for st in record["stages"]] == [2, 2]
    assert 0.0 <= record["heldout_accuracy"] <= 1.0
    model = load_model(tmp_path / "policy")
    assert model.config.arch == "qwen3" and model.config.num_layers == 2
    assert model.config.eos_token_id == [2]
    saved = json.loads((tmp_path / "policy" / "recipe.json").read_text())
    assert [st["name"] for st in saved["recipe"]["stages"]] == ["a", "b"]
    assert json.loads((tmp_path / "policy" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert (tmp_path / "policy" / "tokenizer.json").is_file()


def test_pretrain_grows_the_trained_model_into_the_shipped_shape(tmp_path):
    shape = dict(grow=True, grow_hidden_size=64, grow_intermediate_size=96, grow_num_layers=3, grow_num_heads=4,
                 grow_num_kv_heads=2)
    record = pretrain(tmp_path / "policy", PretrainConfig(stages=stages(1), time_budget_s=60, **{**TINY, **shape}))
    model = load_model(tmp_path / "policy")
    assert (model.config.num_layers, model.config.hidden_size, model.config.num_heads) == (3, 64, 4)
    assert record["num_params"] == model.config.num_params > record["trained_num_params"]


def test_stop_after_ends_early_on_the_longer_schedule(tmp_path, monkeypatch):
    import specrl.tasks.pretrain as pt
    seen = []
    monkeypatch.setattr(pt, "clock_step", lambda step, total, elapsed, budget: seen.append((step, total)) or step)
    cut = (Stage("a", steps=8, stop_after=3, optim=stage_optim(1e-3)),)
    record = pretrain(tmp_path / "policy", PretrainConfig(stages=cut, time_budget_s=600, **{**TINY, "grow": False}))
    assert record["steps_done"] == 3
    assert seen == [(0, 8), (1, 8), (2, 8)]  # the 8-step schedule, cut after 3 steps
    with pytest.raises(ValueError, match="stop_after"):
        Stage("a", steps=8, optim=stage_optim(1e-3), stop_after=-1)
    with pytest.raises(ValueError, match="max_hops=1000"):
        Stage("a", steps=8, optim=stage_optim(1e-3), max_hops=1000)  # a counter has 3 digits
    with pytest.raises(ValueError, match=r"stages=\(\) is invalid: expected at least one Stage"):
        PretrainConfig(stages=())
