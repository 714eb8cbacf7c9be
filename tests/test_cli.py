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
    assert "choose one of ['engine', 'spec']" in capsys.readouterr().err


def test_module_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "specrl", "--help"], capture_output=True, text=True, check=True)
    assert "specrl <command>" in out.stdout
