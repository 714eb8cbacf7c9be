"""docs/cli.md is what the parsers print (regenerate it with `python -m specrl.cli.reference`), every flag of
the commands says what it does, and every command the README and docs name answers --help."""
import argparse
import re
from pathlib import Path

import pytest

from specrl.cli import reference
from specrl.cli.main import BENCHES, COMMANDS, main

ROOT = Path(__file__).parents[2]
# every command with an argparse parser (bench dispatches to the benches, train-drafter prints its settings'
# table: test_every_train_drafter_setting_has_help), then every bench
PARSERS = [COMMANDS[name][:2] for name in COMMANDS if name not in ("bench", "train-drafter")]
PARSERS += [(module, "main") for module, _ in BENCHES.values()]


def test_the_committed_reference_is_what_the_parsers_print():
    assert (ROOT / "docs" / "cli.md").read_text() == reference.render(), (
        "docs/cli.md is stale: run `python -m specrl.cli.reference` and commit docs/cli.md")


def test_a_stale_entry_is_caught(monkeypatch):
    """The check above compares whole pages: one changed help line makes them differ."""
    committed = (ROOT / "docs" / "cli.md").read_text()
    stale = committed.replace("completions per prompt", "samples per prompt")
    assert stale != committed and stale != reference.render()


def test_the_reference_names_every_command_and_bench():
    page = reference.render()
    for name in COMMANDS:
        assert f"## `specrl {name}`" in page
    for name in BENCHES:
        assert f"## `specrl bench {name}`" in page
    assert "## `specrl simulate sweep`" in page


def _actions(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _actions(sub)
        elif not isinstance(action, argparse._HelpAction):
            yield action


@pytest.mark.parametrize("module, func", PARSERS)
def test_every_flag_has_help(module, func):
    parser, _ = reference.parser_of(module, func, ["--help"])
    assert parser is not None, f"{module}.{func} builds no argparse parser"
    bare = [a.option_strings or a.dest for a in _actions(parser) if not a.help]
    assert bare == [], f"{parser.prog}: these have no help text"


def test_the_help_check_sees_a_bare_flag():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bare")
    ap.add_argument("--told", help="says what it does")
    assert [a.option_strings for a in _actions(ap) if not a.help] == [["--bare"]]


def _named_commands() -> set[tuple[str, ...]]:
    """`specrl NAME [SUB]` as the README and docs/ write it."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    named = set()
    for page in pages:
        for name, sub in re.findall(r"specrl ([a-z][a-z-]+)(?: ([a-z][a-z0-9_-]+))?", page.read_text()):
            if name not in COMMANDS:
                continue
            subs = BENCHES if name == "bench" else reference.subparsers(
                reference.parser_of(*COMMANDS[name][:2], ["--help"])[0] or argparse.ArgumentParser())
            named.add((name, sub) if sub in subs else (name,))
    return named


def test_every_command_the_docs_name_answers_help(capsys):
    named = _named_commands()
    assert ("train",) in named and ("bench", "adaptive") in named and ("bench", "sync-async-2x2") in named
    for words in sorted(named):
        assert main([*words, "--help"]) == 0, words
        assert "usage" in capsys.readouterr().out.lower() or words == ("train-drafter",), words


def test_every_train_drafter_setting_has_help():
    from specrl.cli.train_drafter import TrainDrafterConfig, field_help, settings_help
    helps = field_help(TrainDrafterConfig)
    assert [k for k in TrainDrafterConfig.__dataclass_fields__ if not helps.get(k)] == []
    assert "  --ttt-steps              7        eagle3: training-time-test unroll steps" in settings_help()
