"""`specrl bench engine|spec|adaptive|peer`: print JSON lines."""
from __future__ import annotations

import importlib
import sys

BENCHES = {"engine": "specrl.cli.bench_engine", "spec": "specrl.cli.bench_spec",
           "adaptive": "specrl.cli.bench_adaptive", "peer": "specrl.cli.bench_peer"}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHES:
        got = argv[0] if argv else "nothing"
        print(f"specrl bench: got {got!r}; choose one of {sorted(BENCHES)}, e.g. `specrl bench engine`",
              file=sys.stderr)
        return 2
    return importlib.import_module(BENCHES[argv[0]]).main(argv[1:])
