"""`specrl bench peer`'s b64 workload (64 chain prompts x 1 sample, T=1, per-request seeds) on one engine,
split into prefill and decode and profiled op by op, so specrl's engine and vLLM compare component by
component on the same prompts and shapes.

Per engine, after the bench's warm-up: a timed prefill-only generate (max_tokens=1), a timed full generate
(--max-tokens), then both again under torch's profiler (specrl in this process; vLLM in its worker, through
`profiler_config` and start_profile/stop_profile, which writes its own op table). vLLM's prefix cache is
reset before every generate, so each one starts from what the bench's b64 row started from; it reports how
many prompt tokens its prefix cache served (`prefix_cache_hits`). The CPU seconds of this process and of
every process under it are recorded over the full generate (vLLM's engine core and worker are separate
processes).

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/vllm_b64_phases.py --engine specrl --out /tmp/ph
    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/vllm_b64_phases.py --engine vllm --out /tmp/ph
    ... --engine vllm --no-prefix-caching --no-profile   # vLLM computing every prompt token
"""
import argparse
import json
import shutil
import time
from pathlib import Path
from types import SimpleNamespace


def cpu_seconds() -> dict:
    """User+system CPU seconds of this process and each live process under it, by name."""
    import psutil
    me = psutil.Process()
    out = {}
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            out[f"{p.name()}:{p.pid}"] = t.user + t.system
        except psutil.Error:
            pass
    return out


def build(engine: str, model: str, prefix_caching: bool, profile_dir: Path | None):
    if engine == "specrl":
        from specrl import LLM
        from specrl.threads import set_threads
        set_threads(1)
        return LLM(model, dtype="float32", max_num_seqs=64)
    import vllm
    base = vllm.LLM
    extra = {"enable_prefix_caching": prefix_caching}
    if profile_dir is not None:
        extra["profiler_config"] = {"profiler": "torch", "torch_profiler_dir": str(profile_dir),
                                    "torch_profiler_with_stack": False, "torch_profiler_use_gzip": True}
    vllm.LLM = lambda *a, **kw: base(*a, **kw, **extra)  # the bench's engine, plus these settings
    from benchmarks.peer import build as bench_build
    return bench_build({"engine": "vllm", "method": "off", "vllm_mode": "eager"}, Path(model),
                       SimpleNamespace(k=4, threads=1), 64)


def run(engine, llm, prompts, max_tokens: int) -> tuple[float, int]:
    from specrl.engine import SamplingParams
    if engine == "vllm":
        llm.llm.reset_prefix_cache()
    params = [SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=1000 + i) for i in range(len(prompts))]
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    return time.perf_counter() - t0, sum(len(c.token_ids) for r in outs for c in r.outputs)


def prefix_hits(llm) -> float:
    return sum(m.value for m in llm.llm.get_metrics() if m.name == "vllm:prefix_cache_hits")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=("specrl", "vllm"), required=True)
    ap.add_argument("--model", default="/work/models-vllm/smollm2")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-prefix-caching", action="store_true")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--repeats", type=int, default=1, help="timed (unprofiled) rounds of prefill + full")
    args = ap.parse_args()
    from benchmarks.peer import workload
    from specrl.engine import SamplingParams
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = args.engine + ("_nopc" if args.no_prefix_caching else "")
    prof_dir = None if args.no_profile or args.engine == "specrl" else out / f"{tag}_trace"
    prompts, _, _ = workload("b64", args.model, SimpleNamespace(max_tokens=args.max_tokens, rl_max_tokens=None))
    t0 = time.perf_counter()
    llm = build(args.engine, args.model, not args.no_prefix_caching, prof_dir)
    row = {"engine": args.engine, "prefix_caching": not args.no_prefix_caching, "build_s": time.perf_counter() - t0,
           "prompt_tokens": sum(map(len, prompts))}
    llm.generate(prompts[:1], [SamplingParams(max_tokens=8)])  # the bench's warm-up
    for r in range(args.repeats):
        row["repeat"] = r
        for phase, max_tokens in (("prefill", 1), ("full", args.max_tokens)):
            before = cpu_seconds()
            hits = prefix_hits(llm) if args.engine == "vllm" else 0
            row[f"{phase}_s"], row[f"{phase}_tokens"] = run(args.engine, llm, prompts, max_tokens)
            after = cpu_seconds()
            row[f"{phase}_cpu_s"] = {k: round(v - before.get(k, 0.0), 2) for k, v in after.items()}
            if args.engine == "vllm":
                row[f"{phase}_prefix_cache_hits"] = prefix_hits(llm) - hits
        print(json.dumps(row), flush=True)
    if args.no_profile:
        if args.engine == "vllm":
            llm.close()
        return
    for phase, max_tokens in (("prefill", 1), ("full", args.max_tokens)):
        if args.engine == "specrl":
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                wall, _ = run(args.engine, llm, prompts, max_tokens)
            table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=80)
        else:
            llm.llm.start_profile()
            wall, _ = run(args.engine, llm, prompts, max_tokens)
            llm.llm.stop_profile()
            time.sleep(2)
            table = "\n".join(p.read_text() for p in sorted(prof_dir.glob("*.profiler_out.txt")))
            for p in prof_dir.glob("*.profiler_out.txt"):
                shutil.move(p, out / f"{tag}_{phase}_{p.name}")
        (out / f"{tag}_{phase}_table.txt").write_text(f"wall_s {wall:.3f}\n{table}\n")
        print(json.dumps({"engine": args.engine, "profiled": phase, "wall_s": wall}), flush=True)
    if args.engine == "vllm":
        llm.close()


if __name__ == "__main__":
    main()
