"""The benchmarks, `specrl bench NAME` (specrl/cli/main.py's BENCHES): one module each, whose `main(argv)` prints
JSON lines. Only the CLI imports them, and they import transformers, vLLM, Ray or matplotlib only when a run
needs it (a missing one ends in one line that names the extra)."""
