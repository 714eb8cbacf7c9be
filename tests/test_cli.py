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
    assert "choose one of ['adaptive', 'audit', 'engine', 'peer', 'spec']" in capsys.readouterr().err


def test_module_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "specrl", "--help"], capture_output=True, text=True, check=True)
    assert "specrl <command>" in out.stdout


def test_bench_spec_quick_runs_a_small_workload(capsys):
    """--quick shrinks the workload to batch sizes 1 and 4 (the full run also measures 16, 64 and "rl")."""
    assert main(["bench", "spec", "--quick", "--methods", "ngram"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [(r["method"], r["batch_size"]) for r in rows] == [("ngram", 1), ("ngram", 4)]
    from specrl.train.config import TrainConfig
    assert {r["k"] for r in rows} == {TrainConfig().rollout.spec.num_speculative_tokens}  # train's k, left out


def test_bench_spec_on_a_prompt_file_checks_greedy_identity(capsys, tmp_path):
    """What benchmarks/real_model.py and bf16_sd_identity.py did: prompts from a file, greedy, SD on vs off."""
    from specrl.tasks import make_problems
    rows = [{"prompt": p.prompt, "answer": p.answer} for p in make_problems(4, seed=5, split="test")]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["bench", "spec", "--quick", "--methods", "suffix", "--batch-sizes", "2", "--repeats", "2",
                 "--prompts", str(prompts), "--check-identity", "--threads", "1"]) == 0
    row = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")][0]
    assert row["same_tokens"] and row["sequences_differ"] == 0  # fp32 greedy SD: the same tokens
    assert row["cpu_tokens_per_s"] > 0 and row["peak_rss_mb"] > 0
