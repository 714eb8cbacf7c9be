"""The CLI reference, docs/cli.md, written from the commands' own parsers: `python -m specrl.cli.reference
[--out docs/cli.md]`. tests/cli/test_reference.py fails when the committed file differs from what this writes, so
a changed flag or help line is a regenerated page, never a stale one.

Each command's parser is caught as the command builds it (`parse_known_args` raises before any work starts), so
the page holds exactly what `specrl COMMAND --help` prints, at a fixed width.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
from pathlib import Path
from unittest import mock

from ..registry import load
from .main import BENCHES, COMMANDS, bench_usage, usage

WIDTH = "100"  # argparse wraps to $COLUMNS; fixed so that the page does not depend on the terminal
HEADER = """# CLI reference

Generated from the parsers by `python -m specrl.cli.reference` (a test fails when this page is stale): what
`specrl COMMAND --help` prints. Concepts and examples: [getting-started.md](getting-started.md),
[concepts.md](concepts.md).
"""


class _Caught(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser


def _catch(parser, args=None, namespace=None):
    raise _Caught(parser)


def parser_of(module: str, func: str, argv: list[str]) -> tuple[argparse.ArgumentParser | None, str]:
    """(the argparse parser `module.func(argv)` builds, ""), or (None, what it printed) for a command that
    prints its own --help."""
    out = io.StringIO()
    with mock.patch.object(argparse.ArgumentParser, "parse_known_args", _catch), contextlib.redirect_stdout(out):
        try:
            load(f"{module}:{func}")(argv)
        except _Caught as caught:
            return caught.parser, ""
        except SystemExit:
            pass
    return None, out.getvalue()


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's subcommands by name (`specrl simulate step`, ...), empty when it has none."""
    return {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


def help_texts() -> dict[str, str]:
    """`specrl ...` invocation -> its --help text, for every command, subcommand and bench."""
    with mock.patch.dict(os.environ, {"COLUMNS": WIDTH}):
        texts = {"specrl": usage()}
        for name, (module, func, _) in COMMANDS.items():
            if name == "bench":
                texts["specrl bench"] = bench_usage()
                for bench in BENCHES:
                    texts[f"specrl bench {bench}"] = _text(BENCHES[bench][0], "main")
                continue
            texts[f"specrl {name}"] = _text(module, func)
            parser, _ = parser_of(module, func, ["--help"])
            for sub, sub_parser in (subparsers(parser) if parser else {}).items():
                texts[f"specrl {name} {sub}"] = sub_parser.format_help()
    return texts


def _text(module: str, func: str) -> str:
    parser, printed = parser_of(module, func, ["--help"])
    return parser.format_help() if parser is not None else printed


def render() -> str:
    sections = [HEADER]
    for invocation, text in help_texts().items():
        sections.append(f"## `{invocation}`\n\n```text\n{text.rstrip()}\n```\n")
    return "\n".join(sections)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specrl.cli.reference", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).parents[2] / "docs" / "cli.md",
                    help="the page to write (default: the clone's docs/cli.md)")
    args = ap.parse_args(argv)
    args.out.write_text(render())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
