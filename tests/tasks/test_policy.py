"""The shipped base policy: its size and accuracy bars, checked from what is on disk."""
import json

import pytest

import specrl.tasks as tasks
from specrl.cli.pretrain import parse_args


def test_missing_policy_tells_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setattr(tasks, "POLICY_DIR", tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="specrl pretrain --out"):
        tasks.default_policy_path()


def test_cli_arguments_map_onto_the_config(tmp_path):
    out, cfg = parse_args(["--out", str(tmp_path), "seed=3", "--time-budget-s", "12.5", "bf16_autocast=false",
                           "stages.chains.steps=7", "--stages.habit.stop_after", "2"])
    assert out == tmp_path
    assert (cfg.seed, cfg.time_budget_s, cfg.bf16_autocast) == (3, 12.5, False)
    by_name = {st.name: st for st in cfg.stages}
    assert (by_name["chains"].steps, by_name["habit"].stop_after, by_name["lookups"].steps) == (7, 2, 2400)


def test_one_bool_parser_for_every_command():
    # pretrain and `specrl train` read "on" alike: both go through from_dict
    from specrl.cli.train import build_config
    for word, value in (("on", True), ("yes", True), ("1", True), ("off", False), ("no", False), ("0", False)):
        assert parse_args(["--out", "new_policy", f"bf16_autocast={word}"])[1].bf16_autocast is value
        assert build_config(None, [f"tensorboard={word}"]).tensorboard is value
    assert parse_args(["--out", "new_policy", "--bf16-autocast"])[1].bf16_autocast is True  # a lone --flag is key=true


@pytest.mark.parametrize("bad, message", [("stages.chains.nope=1", "unknown config key 'stages.chains.nope'"),
                                          ("stages.nostage.steps=1", "stages.nostage is not a stage"),
                                          ("stages.chains.steps", "not of the form key=value"),
                                          ("stages.chains.steps=x", "stages.chains.steps='x' is invalid"),
                                          ("bf16_autocast=maybe", "expected a boolean")])
def test_bad_stage_overrides_name_the_fix(bad, message):
    from specrl.errors import UserError
    with pytest.raises(UserError, match=message):
        parse_args([bad])


@pytest.fixture(scope="module")
def policy_dir():
    try:
        return tasks.default_policy_path()
    except FileNotFoundError:
        pytest.skip("no shipped policy; run `specrl pretrain`")


def test_shipped_policy_meets_the_bars(policy_dir):
    from specrl.model import load_model

    files = {p.name: p.stat().st_size for p in policy_dir.iterdir()}
    assert sum(v for k, v in files.items() if k.endswith(".safetensors")) <= 25 * 2**20
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "recipe.json"):
        assert name in files
    model = load_model(policy_dir)
    cfg = model.config
    assert cfg.arch in ("qwen3", "llama") and cfg.num_layers >= 6
    n = sum(p.numel() for p in model.parameters())
    assert n >= 10_000_000 and n * 4 > 32 * 2**20  # fp32 weights exceed a 32 MB L3 cache
    assert next(model.parameters()).dtype.is_floating_point
    recipe = json.loads((policy_dir / "recipe.json").read_text())
    assert 0.1 <= recipe["heldout_accuracy"] <= 0.6  # room for RL to improve
    assert 0.05 <= recipe["heldout_counted_share"] <= 0.5  # the habit is the plain style, the better one is known
    tok, ids = tasks.load_tokenizer(policy_dir)
    assert tok.get_vocab_size() == cfg.vocab_size and cfg.eos_token_id == [ids.eos]


@pytest.mark.slow
def test_shipped_policy_accuracy_reproduces(policy_dir):
    # re-measure on 48 held-out short chains (2-5 hops, where the recipe's record puts the policy at 0.375-1.0)
    # so the check stays quick; loose bounds, the recorded figures used 200 problems of every length
    from specrl.model import load_model
    from specrl.tasks.pretrain import accuracy

    tok, _ = tasks.load_tokenizer(policy_dir)
    short = tasks.task_spec("chain", hops_median=3, hops_sigma=0.3, max_hops=5)
    acc, completions = accuracy(load_model(policy_dir), tok, tasks.make_problems(48, 0, "test", short),
                                max_new_tokens=80)
    assert 0.3 <= acc <= 1.0
    assert all("\n" in c or c.startswith("A:") for c in completions[:8])
