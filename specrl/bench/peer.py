"""`specrl bench peer`: specrl's engine against vLLM on the same checkpoint, the same token-id prompts and the
same sampling settings, one engine per process (a subprocess per engine), alternating and repeated.

    specrl bench peer                                   # embedded policy: SD off and specrl's default SD
    specrl bench peer --model DIR --methods off,ngram   # a real checkpoint (e.g. SmolLM2), with vLLM's ngram
    specrl bench peer --dtype float32                   # both engines in one dtype
    specrl bench peer --reuse rows.jsonl --out peer.png # a chart of printed rows: each arm over vLLM's SD off

Each engine runs at its own defaults unless told: its default dtype (specrl `auto`, the probe's choice; vLLM
`auto`, its own) and, for `--methods default`, its default SD (specrl's adaptive `auto`; vLLM has no exact SD
on by default, so its `default` row is SD off). Every row names the dtype the engine ran.

Workloads: `b1` (one prompt), `b64` (64 prompts, one sample each), `rl` (the default run's rollout at its
response budget, or --rl-max-tokens), on the embedded task's prompts encoded as `specrl train` encodes them;
every request has its own seed. One process builds one engine (room for the largest workload's batch), warms
it up and times each workload in turn. vLLM runs with its defaults (`vllm_mode=compile`) and eager
(`vllm_mode=eager`). One JSON line per measurement (with `audit_p`, the sampler audit's p-value, on sampled SD
rows, and `digests`, a short hash of each completion's token ids, so rows of the same seeds compare sample by
sample), then one `"summary": true` line per (engine, method, workload): the best repeat, vLLM's faster mode.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specrl.errors import pyplot

from .common import digest, emit, encoded_task_prompts, policy_path

ENGINES = ("specrl", "vllm")
WORKLOADS = ("b1", "b64", "rl")
VLLM_MODES = ("compile", "eager")
CHILD_GRACE_S = 30.0  # a child's engine close: vLLM's shutdown and the reap of what it leaves


def split(text: str, allowed: tuple[str, ...] | None, flag: str) -> list[str]:
    from specrl.errors import UserError
    items = [t for t in text.split(",") if t]
    bad = [t for t in items if allowed is not None and t not in allowed]
    if not items or bad:
        raise UserError(f"{flag} {text!r}: choose from {list(allowed) if allowed else 'a comma-separated list'}")
    return items


def plan(args) -> list[dict]:
    """The engine processes in order: per round and method, the engines alternate which goes first; each
    process times every workload."""
    from specrl.engine import get_method
    engines, workloads = split(args.engines, ENGINES, "--engines"), split(args.workloads, WORKLOADS, "--workloads")
    methods, modes = split(args.methods, None, "--methods"), split(args.vllm_modes, VLLM_MODES, "--vllm-modes")
    for m in methods:
        if m not in ("off", "default"):
            get_method(m)  # an unknown name fails before any engine starts
    runs = []
    for r in range(args.repeats):
        for method in methods:
            for engine in (engines if r % 2 == 0 else engines[::-1]):
                for mode in (modes if engine == "vllm" else [None]):
                    runs.append({"engine": engine, "method": method, "workloads": workloads, "repeat": r,
                                 **({"vllm_mode": mode} if mode else {})})
    return runs


def workload(name: str, model_dir: Path, args) -> tuple[list[list[int]], int, int]:
    """(prompt ids, samples per prompt, max_tokens) of a workload."""
    from specrl.config.run import TrainConfig
    cfg = TrainConfig()
    count, n = {"b1": (1, 1), "b64": (64, 1), "rl": (cfg.rollout.prompts_per_step, cfg.rollout.n)}[name]
    max_tokens = (args.rl_max_tokens or cfg.budget.max_tokens) if name == "rl" else args.max_tokens
    return encoded_task_prompts(model_dir, count, split="train" if name == "rl" else "test"), n, max_tokens


DEFAULT_SD = {"specrl": "auto", "vllm": None}  # `--methods default`: each engine's SD at its defaults


def sd_method(run: dict) -> str | None:
    return DEFAULT_SD[run["engine"]] if run["method"] == "default" else None if run["method"] == "off" \
        else run["method"]


def build(run: dict, model_dir: Path, args, batch: int):
    """The engine of one measurement, behind generate(prompts, [SamplingParams]); and the dtype it runs."""
    method = sd_method(run)
    if run["engine"] == "specrl":
        from specrl import LLM, SpecConfig
        from specrl.threads import set_threads
        set_threads(args.threads)
        spec = SpecConfig(method=method, num_speculative_tokens=args.k, draft_model=args.draft_model) if method else None
        llm = LLM(str(model_dir), dtype=args.dtype, max_num_seqs=batch, spec=spec)
        return llm, llm.precision.name
    from specrl.config import load_config
    from specrl.pipeline.vllm.build import vllm_backend
    from specrl.config.run import TrainConfig
    cfg = load_config(TrainConfig, None, [f"rollout.spec.method={method or 'null'}", f"dtype={args.dtype}",
                                          f"rollout.spec.num_speculative_tokens={args.k}",
                                          f"rollout.spec.draft_model={args.draft_model or 'null'}",
                                          f"rollout.max_num_seqs={batch}",
                                          f"vllm.enforce_eager={run['vllm_mode'] == 'eager'}"])
    backend = vllm_backend(model_dir, cfg)
    return backend, str(backend.llm.llm_engine.model_config.dtype).removeprefix("torch.")


def measure(run: dict, model_dir: Path, args) -> list[dict]:
    """One engine in this process: build, warm up, time one generate() per workload; a row each."""
    from specrl.engine import SamplingParams
    loads = {name: workload(name, model_dir, args) for name in run["workloads"]}
    t0 = time.perf_counter()
    engine, dtype = build(run, model_dir, args, max(len(p) * n for p, n, _ in loads.values()))
    build_s = time.perf_counter() - t0
    head = {"model": model_dir.name, **{k: v for k, v in run.items() if k not in ("workloads", "repeat")},
            "dtype": dtype, "sd": sd_method(run) or "off"}
    rows = []
    try:
        engine.generate(next(iter(loads.values()))[0][:1], [SamplingParams(max_tokens=8)])  # warm-up (compile)
        for name, (prompts, n, max_tokens) in loads.items():
            params = [SamplingParams(n=n, temperature=args.temperature, max_tokens=max_tokens, seed=1000 + i,
                                     ignore_eos=args.ignore_eos) for i in range(len(prompts))]
            engine.reset_stats()
            t0 = time.perf_counter()
            outs = engine.generate(prompts, params)
            seconds = time.perf_counter() - t0
            tokens = sum(len(c.token_ids) for r in outs for c in r.outputs)
            digests = [digest(c.token_ids) for r in outs for c in r.outputs]
            row = {**head, "workload": name, "tokens": tokens, "makespan_s": seconds, "tokens_per_s": tokens / seconds,
                   "repeat": run["repeat"], "build_s": build_s, "max_tokens": max_tokens,
                   "ignore_eos": args.ignore_eos,
                   "acceptance_length": (engine.stats() if run["engine"] == "vllm" else engine.stats)  # LLM: a dict
                   .get("acceptance_length", 1.0), "digests": digests}
            if sd_method(run) and args.temperature > 0 and not args.no_audit:
                row["audit_p"] = audit_p(model_dir, outs, args.temperature)
            rows.append(row)
    finally:  # also on SIGTERM (cli/main.py's Terminated): vLLM's engine processes must not outlive us
        if run["engine"] == "vllm":
            engine.close()
    return rows


def audit_p(model_dir: Path, outs, temperature: float) -> float:
    """The sampler audit's p-value on these completions (specrl audit's e-process: 1 / its running maximum)."""
    from specrl.audit.offline import audit_completions
    from specrl.model import load_model
    model = load_model(str(model_dir), dtype="float32").eval()
    prompts = [r.prompt_token_ids for r in outs for _ in r.outputs]
    completions = [c.token_ids for r in outs for c in r.outputs]
    return audit_completions(model, prompts, completions, temperature)[0]["p_value"]


def child(run: dict, model_dir: Path, argv: list[str]) -> list[dict]:
    """One engine's measurements in a fresh process (its JSON stdout lines); an engine that fails is an
    `error` row."""
    cmd = [sys.executable, "-m", "specrl", "bench", "peer", *argv, "--one", json.dumps(run)]
    with tempfile.TemporaryFile("w+") as log, \
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True) as proc:
        try:
            stdout, _ = proc.communicate()
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM here: the child closes its engine, then we stop
            stop_child(proc)
            raise
        if proc.returncode != 0:
            log.seek(0)
            tail = " | ".join(log.read().strip().splitlines()[-3:])
            return [{**run, "error": f"exit {proc.returncode}: {tail[-300:]}"}]
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def stop_child(proc: subprocess.Popen) -> None:
    """SIGTERM, which the child turns into its normal exit (its engine closed), then SIGKILL after
    CHILD_GRACE_S. Not Popen's own handling of an interrupt: it SIGKILLs the child, whose engine processes
    then outlive it."""
    proc.terminate()
    try:
        proc.wait(timeout=CHILD_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()


def summary(rows: list[dict]) -> list[dict]:
    """Per (engine, method, workload): the fastest measurement (for vLLM, over both modes)."""
    best: dict[tuple, dict] = {}
    for r in rows:
        if "error" in r:
            continue
        key = (r["engine"], r["method"], r["workload"])
        if key not in best or r["tokens_per_s"] > best[key]["tokens_per_s"]:
            best[key] = r
    return [{**r, "summary": True} for r in best.values()]


def plot(rows: list[dict], out: str) -> None:
    """A PNG of the best rows: per model, each (engine, method)'s tokens/s over vLLM's SD off (its `default` row
    where measured) on every workload; 1.0 is level with vLLM at its defaults."""
    plt = pyplot("specrl bench peer --out")
    measured = [r for r in rows if not r.get("summary") and "error" not in r]
    models = sorted({r["model"] for r in measured})
    best = [r for m in models for r in summary([r for r in measured if r["model"] == m])]
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4.6), squeeze=False)
    for ax, model in zip(axes[0], models):
        mine = [r for r in best if r["model"] == model]
        vllm_off = sorted((r for r in mine if r["engine"] == "vllm" and r["sd"] == "off"),
                          key=lambda r: r["method"] == "default")  # its `default` row when there is one
        base = {r["workload"]: r["tokens_per_s"] for r in vllm_off}
        loads = [w for w in WORKLOADS if w in base]
        arms = sorted({(r["engine"], r["method"], r["sd"]) for r in mine})
        width = 0.8 / max(len(arms), 1)
        for i, (engine, method, sd) in enumerate(arms):
            got = {r["workload"]: r["tokens_per_s"] for r in mine if (r["engine"], r["method"]) == (engine, method)}
            ax.bar([j + i * width for j in range(len(loads))], [got.get(w, 0) / base[w] for w in loads], width,
                   label=f"{engine} {method} ({sd})")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(loads))], loads)
        ax.set_title(f"{model}: tokens/s over vLLM's SD off", fontsize=10)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=3)
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    emit({"plot": out})


def read_rows(paths: list[str]) -> list[dict]:
    """The JSON lines of earlier runs (their summary lines are recomputed)."""
    from specrl.errors import MissingFileError
    from specrl.pipeline.run_dir import read_jsonl
    missing = [path for path in paths if not Path(path).is_file()]
    if missing:
        raise MissingFileError(f"--reuse {missing[0]}: no such file; pass the JSON lines a `specrl bench peer` printed")
    return [row for path in paths for row in read_jsonl(path)]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="specrl bench peer", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="HF checkpoint dir (default: the embedded policy)")
    ap.add_argument("--engines", default="specrl,vllm", help="specrl, vllm or both, comma-separated")
    ap.add_argument("--methods", default="off,default",
                    help="off, default (each engine's default SD) and/or SD methods both engines run, e.g. off,ngram")
    ap.add_argument("--dtype", default="auto", help="both engines' dtype (default: auto, each engine's own default)")
    ap.add_argument("--workloads", default="b1,b64,rl", help="b1 (one prompt), b64 (64 prompts), rl (the default "
                    "run's rollout: 8 prompts x 8 samples), comma-separated")
    ap.add_argument("--vllm-modes", default="compile,eager", help="vLLM with torch.compile, eager, or both (the "
                    "faster one goes to the summary)")
    ap.add_argument("--repeats", type=int, default=3, help="rounds; each round alternates the engines' order")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (0: greedy)")
    ap.add_argument("--max-tokens", type=int, default=256, help="b1 and b64's budget")
    ap.add_argument("--rl-max-tokens", type=int, default=None, help="rl's budget (default: the default run's)")
    ap.add_argument("--ignore-eos", action="store_true",
                    help="generate every budget to its end (vLLM's benchmark flag): fixed work per row")
    ap.add_argument("--k", type=int, default=4, help="draft length of the SD methods")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads of specrl's engine")
    ap.add_argument("--draft-model", help="the drafter checkpoint of draft_model / eagle3 for both engines (e.g. "
                    "`specrl train-drafter --model DIR` output, for a --model other than the embedded policy); "
                    "default: the shipped one")
    ap.add_argument("--no-audit", action="store_true", help="skip the sampler audit of sampled SD rows")
    ap.add_argument("--out", help="also draw the summary as a PNG here (needs matplotlib)")
    ap.add_argument("--reuse", nargs="+", metavar="ROWS", help="draw --out from the JSON lines of earlier runs "
                    "instead of measuring")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a child: one measurement (JSON)
    args = ap.parse_args(argv)
    if args.reuse:
        if not args.out:
            from specrl.errors import UserError
            raise UserError("--reuse draws a chart: pass --out FILE.png too")
        plot(read_rows(args.reuse), args.out)
        return 0
    model_dir = Path(policy_path(args.model))
    if args.one is not None:
        for row in measure(json.loads(args.one), model_dir, args):
            emit(row)
        return 0
    rows = []
    for run in plan(args):  # bad flags fail here, before any engine starts
        for row in child(run, model_dir, argv):
            rows.append(row)
            emit(row)
    for row in summary(rows):
        emit(row)
    if args.out:
        plot(rows, args.out)
    return 0
