import json
import subprocess
import sys

from specrl.cli.main import COMMANDS, main


def test_help_lists_commands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_unknown_command_suggests(capsys):
    assert main(["trian"]) == 2
    assert "did you mean 'train'" in capsys.readouterr().err


def test_bench_needs_a_known_benchmark(capsys):
    assert main(["bench", "engin"]) == 2
    assert "got 'engin'; choose one of ['adaptive', 'audit', 'bf16-step', 'default-run', 'engine'," in capsys.readouterr().err


def test_module_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "specrl", "--help"], capture_output=True, text=True, check=True)
    assert "specrl <command>" in out.stdout


def test_bench_spec_quick_runs_a_small_workload(capsys):
    """--quick shrinks the workload to batch sizes 1 and 4 (the full run also measures 16, 64 and "rl")."""
    assert main(["bench", "spec", "--quick", "--methods", "ngram"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [(r["method"], r["batch_size"]) for r in rows] == [("ngram", 1), ("ngram", 4)]
    from specrl.config.run import TrainConfig
    assert {r["k"] for r in rows} == {TrainConfig().rollout.spec.num_speculative_tokens}  # train's k, left out


def test_bench_spec_on_a_prompt_file_checks_greedy_identity(capsys, tmp_path):
    """Prompts from a file, greedy, SD on vs off: every sequence the same."""
    from specrl.tasks import make_problems
    rows = [{"prompt": p.prompt, "answer": p.answer} for p in make_problems(4, seed=5, split="test")]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["bench", "spec", "--quick", "--methods", "suffix", "--batch-sizes", "2", "--repeats", "2",
                 "--prompts", str(prompts), "--check-identity", "--threads", "1"]) == 0
    row = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")][0]
    assert row["same_tokens"] and row["sequences_differ"] == 0  # fp32 greedy SD: the same tokens
    assert row["cpu_tokens_per_s"] > 0 and row["peak_rss_mb"] > 0


def test_bench_spec_rl_row_is_a_train_configs_rollout(capsys, tmp_path):
    """--config: the rl row runs that config's rollout (prompts x n, k), --repeats rollouts of other prompts."""
    from specrl.tasks import make_problems
    rows = [{"prompt": p.prompt, "answer": p.answer} for p in make_problems(6, seed=5, split="test")]
    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"data:\n  source: {data}\nrollout:\n  prompts_per_step: 1\n  n: 2\n  max_tokens: 8\n")
    assert main(["bench", "spec", "--config", str(cfg), "--batch-sizes", "rl", "--methods", "suffix", "--repeats",
                 "2", "--check-identity", "--threads", "1", "--warmup-tokens", "4",
                 "rollout.spec.num_speculative_tokens=2"]) == 0
    row = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")][0]
    assert (row["batch_size"], row["k"], row["sequences"]) == ("rl", 2, 4)  # 2 rollouts of 1 prompt x 2
    assert row["tokens"] <= 4 * 8 and row["same_tokens"]


def test_bench_spec_overrides_need_a_config(capsys):
    assert main(["bench", "spec", "--quick", "rollout.n=2"]) == 2
    assert "pass --config FILE before them" in capsys.readouterr().err


def test_bench_help_lists_every_bench(capsys):
    from specrl.cli.main import BENCHES
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in BENCHES) and "adaptive" in BENCHES
    assert "adaptive" in dict((k, v[2]) for k, v in COMMANDS.items())["bench"]  # the command table's line too


def test_each_bench_answers_help(capsys):
    from specrl.cli.main import BENCHES
    for name in BENCHES:
        assert main(["bench", name, "--help"]) == 0
        assert f"usage: specrl bench {name}" in capsys.readouterr().out


def test_bench_engine_without_transformers_is_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` now fails as if not installed
    assert main(["bench", "engine", "--quick", "--threads", "1", "--workloads", "a"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("specrl bench: error: `specrl bench engine` needs transformers, which is not installed: "
                   "pip install transformers (or 'specrl[dev]')")


def test_pretrain_refuses_to_replace_the_shipped_policy_unasked(capsys):
    from specrl.tasks import POLICY_DIR
    assert main(["pretrain", "seed=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"specrl pretrain: error: pass --out DIR for the new policy; to replace the shipped one, pass "
                   f"its path explicitly: --out {POLICY_DIR}"]


def test_pretrain_writes_the_shipped_policy_only_when_its_path_is_passed():
    from specrl.cli.pretrain import parse_args
    from specrl.tasks import POLICY_DIR
    out, cfg = parse_args(["--out", str(POLICY_DIR), "--seed", "3", "stages.chains.steps=7"])
    assert out == POLICY_DIR and cfg.seed == 3
    assert [st.steps for st in cfg.stages if st.name == "chains"] == [7]


def test_train_drafter_refuses_to_replace_the_shipped_drafter_unasked(capsys):
    from specrl.engine.methods import get_method
    assert main(["train-drafter", "--method", "eagle3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"specrl train-drafter: error: pass --out DIR for the new eagle3 drafter; to replace the shipped "
                   f"one, pass its path explicitly: --out {get_method('eagle3').shipped_dir}"]


def _note(old: str, new: str, prog: str) -> str:
    return f"{prog}: note: {old} is now {new}; the old spelling goes in the next release"


def test_train_drafter_reads_policy_as_model_with_a_note(capsys):
    from specrl.cli.train_drafter import parse_args
    assert parse_args(["method=eagle3", "policy=ckpt", "out=o"]).model == "ckpt"
    assert capsys.readouterr().err.strip() == _note("policy=", "model=", "specrl train-drafter")
    assert parse_args(["--method", "eagle3", "--policy", "ckpt"]).model == "ckpt"
    assert capsys.readouterr().err.strip() == _note("--policy", "--model", "specrl train-drafter")


def test_generate_reads_spec_as_method_with_a_note(capsys):
    assert main(["generate", "--spec", "bogus", "--prompt", "1+1="]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == _note("--spec", "--method", "specrl generate")
    assert "bogus" in err[1]  # the value reached --method, whose check names it


def test_export_drafter_reads_policy_as_model_with_a_note(capsys, tmp_path):
    assert main(["export-drafter", str(tmp_path / "none"), "--policy", "p", "--out", str(tmp_path / "o")]) != 0
    assert capsys.readouterr().err.splitlines()[0] == _note("--policy", "--model", "specrl export-drafter")


def test_simulate_reads_its_old_flags_with_a_note(capsys, tmp_path):
    from specrl.sim.cli import build_parser
    old = ["step", "--sd-method", "ngram", "--prompts", "16", "--model", "qwen3-8b", "--n", "4",
           "--lengths", "lognormal:300,0.6", "--max-tokens", "600"]
    assert main(["simulate", *old]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [_note("--sd-method", "--method", "specrl simulate"),
                   _note("--prompts", "--num-prompts", "specrl simulate"),
                   _note("--model", "--arch", "specrl simulate")]
    a = build_parser().parse_args(["step", "--method", "ngram", "--num-prompts", "16", "--arch", "qwen3-8b"])
    assert (a.sd_method, a.prompts, a.model) == ("ngram", 16, "qwen3-8b")
    from specrl.config.renamed import rename
    assert rename(["sweep", "--plot-dir=d"], {"--plot-dir": "--out"}, "p") == ["sweep", "--out=d"]
    assert capsys.readouterr().err.strip() == _note("--plot-dir", "--out", "p")


def test_generate_writes_rows_the_audit_reads(tmp_path, capsys):
    out = tmp_path / "g.jsonl"
    assert main(["generate", "--task-prompts", "2", "--n", "2", "--max-tokens", "8", "--threads", "1",
                 "--method", "ngram", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 and all(r["completion_ids"] == r["token_ids"] and r["prompt_ids"] for r in rows)
    from specrl.cli.audit import read_rollouts
    prompts, completions = read_rollouts(out, vocab_size=10**6)
    assert completions == [r["token_ids"] for r in rows]


def test_train_flags_set_their_config_keys(monkeypatch, capsys):
    import specrl.pipeline.run as run
    seen = []
    monkeypatch.setattr(run, "train", lambda cfg: seen.append(cfg) or {})
    # flags and overrides intermixed; a flag wins over the same key given as an override, as the last override does
    assert main(["train", "max_steps=1", "--out", "runs/new", "seed=3", "--method", "ngram", "--model", "m",
                 "rollout.spec.method=suffix"]) == 0
    cfg = seen[-1]
    assert (cfg.out_dir, cfg.model, cfg.rollout.spec.method, cfg.seed) == ("runs/new", "m", "ngram", 3)
    assert main(["train", "out_dir=runs/key", "max_steps=1"]) == 0  # the config key itself, as in a YAML file
    assert seen[-1].out_dir == "runs/key" and capsys.readouterr().err == ""


def test_audit_reads_plot_as_out_with_a_note(capsys, tmp_path):
    assert main(["audit", "--model", str(tmp_path / "none"), "--rollouts", "r.jsonl", "--plot", "p.png"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == _note("--plot", "--out", "specrl audit") and "none" in err[1]  # then the missing model


def test_bench_pngs_are_out_with_a_note(capsys, tmp_path):
    assert main(["bench", "packing-throughput", "--png", "p.png"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [_note("--png", "--out", "specrl bench packing-throughput"),
                   "specrl bench: error: pass --batches FILE (written by --record FILE), or --record FILE to write one"]
    assert main(["bench", "audit", "summary", "--rows", str(tmp_path / "none.jsonl"), "--png", "c.png"]) != 0
    assert capsys.readouterr().err.splitlines()[0] == _note("--png", "--out", "specrl bench audit")
    from specrl.bench.adaptive import RENAMED, parser
    from specrl.config.renamed import rename
    assert parser().parse_args(rename(["--png", "a.png"], RENAMED, "specrl bench adaptive")).out == "a.png"
    assert capsys.readouterr().err.strip() == _note("--png", "--out", "specrl bench adaptive")


def test_sim_calibrate_reads_policy_as_model_with_a_note(capsys, tmp_path):
    assert main(["bench", "sim-calibrate", "--policy", str(tmp_path / "none"), "--out", str(tmp_path / "o"),
                 "--threads", "1"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == _note("--policy", "--model", "specrl bench sim-calibrate") and "none" in err[-1]
