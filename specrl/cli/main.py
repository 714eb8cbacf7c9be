"""`specrl <command> ...`: each command lives in its own module and is imported only when run."""
from __future__ import annotations

import importlib
import logging
import sys

COMMANDS = {
    "train": ("specrl.train.train_cli", "main", "GRPO training with speculative rollouts (the main job)"),
    "generate": ("specrl.cli.generate", "main", "generate completions to JSONL (vLLM-style sampling)"),
    "bench": ("specrl.cli.bench", "main", "benchmarks: `bench engine`, `bench spec` (JSON lines)"),
    "simulate": ("specrl.sim.cli", "main", "performance simulator: project speedups on GPU clusters"),
    "pretrain": ("specrl.tasks.pretrain", "pretrain_main", "build the embedded base policy"),
    "train-drafter": ("specrl.train.drafter_cli", "main", "offline drafter training (eagle3/draft_model/mtp)"),
}


def usage() -> str:
    lines = ["usage: specrl <command> [args...]", "", "commands:"]
    lines += [f"  {name:<15} {help_}" for name, (_, _, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        import difflib
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        print(f"specrl: unknown command {name!r}{hint}\n\n{usage()}", file=sys.stderr)
        return 2
    module, func, _ = COMMANDS[name]
    logging.basicConfig(format="specrl: %(message)s")  # stderr; e.g. the engine's KV cache size
    logging.getLogger("specrl").setLevel(logging.INFO)
    try:
        result = getattr(importlib.import_module(module), func)(rest)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
