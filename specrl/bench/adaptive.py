"""`specrl bench adaptive`: every static strategy against the adaptive engine ("auto"), in one process.

For each batch size (1, 4, 16, 64 concurrent sequences, and "rl": one rollout of `specrl train`'s default
config) SD off runs first, then every drafter at every k of --ks, then "auto" (k up to the largest of --ks),
all at temperature 1 on task prompts with a seed per prompt, the same for every strategy. Left out, the
threads, the ks and the RL workload's budget are `specrl train`'s defaults, so the RL row measures what the
main job runs (`--model` a run's checkpoint measures a later policy: train's rollouts move with it). Prints
one JSON line per measurement, then writes --out: speedup over SD off by batch size, and what auto chose over
the RL rollout. --save-profile writes what auto learnt (after the RL workload) as the JSON that
`rollout.spec.auto.cost_profile` reads (engine/adaptive/profile.py); auto starts from the shipped profile for the
embedded policy on this device and dtype, or --profile PATH.
"""
from __future__ import annotations

import json
import sys

from specrl.engine import DRAFTING_METHODS, METHODS, Choices, SpecConfig, is_adaptive
from specrl.config.renamed import rename
from specrl.errors import MissingDependency, UserError, pyplot
from .common import RATE, at_least_one, base_parser, emit, engine, measure, parse_args, policy_path, prompt_sets
from .spec import parse_batch_sizes


MIN_PROMPTS = 8  # prompts a batch-size row measures at least: with fewer, which samples run long decides it


def parse_ks(text: str) -> list[int]:
    try:
        ks = sorted({int(k) for k in text.split(",") if k})
    except ValueError:
        ks = []
    if not ks or any(not 1 <= k <= 16 for k in ks):
        raise UserError(f"--ks {text!r} is invalid: expected draft lengths in 1..16, comma-separated, "
                        "e.g. --ks 1,2,4,8")
    return ks


def parser():
    ap = base_parser("specrl bench adaptive", __doc__, warmup=True)
    ap.add_argument("--methods", default=None, help="the static drafters to compare (default: all; auto then "
                                                    "chooses among `specrl train`'s default drafters), else also "
                                                    "those auto chooses among")
    ap.add_argument("--ks", default=None, help="the static draft lengths, comma-separated; auto's k is the "
                    "largest (default: powers of two up to `specrl train`'s k, rollout.spec.num_speculative_tokens)")
    ap.add_argument("--batch-sizes", default=None, help="default 1,4,16,64,rl (--quick: 1,4)")
    ap.add_argument("--max-tokens", type=int, default=None, help="default 256 (--quick: 32)")
    ap.add_argument("--rl-max-tokens", type=int, default=None,
                    help="default: the default run's response budget (--quick: 32)")
    ap.add_argument("--repeats", type=at_least_one, default=None, help="batches per n=1 measurement; default 2, and at "
                    f"least {MIN_PROMPTS} prompts (--quick: 1)")
    ap.add_argument("--adaptive-mode", default="measured", choices=["measured", "deterministic"],
                    help="auto's cost model: measured timings, or a fixed one (the same choices on every machine)")
    ap.add_argument("--out", default="bench_adaptive.png", help="the plot ('' for none; needs matplotlib)")
    ap.add_argument("--save-profile", default=None, help="write what the adaptive engine learnt here (JSON)")
    ap.add_argument("--profile", default=None, help="auto's starting profile (default: the shipped one, for the "
                                                    "embedded policy on this device and dtype)")
    ap.add_argument("--history", default=None, help="write what auto chose at each step of each workload here "
                                                    "(JSON lines: running sequences, drafter mix, mean k, arm)")
    return ap


RENAMED = {"--png": "--out"}


def main(argv: list[str]) -> int:
    args = parse_args(parser(), rename(argv, RENAMED, "specrl bench adaptive"))
    from specrl.config.run import TrainConfig
    default = TrainConfig()
    rollout = default.rollout  # the RL workload is the default run's rollout, with its task's budget
    for key, full, quick in (("batch_sizes", "1,4,16,64,rl", "1,4"), ("max_tokens", 256, 32),
                             ("rl_max_tokens", default.budget.max_tokens, 32)):
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    ks = parse_ks(args.ks or ",".join(str(2 ** i) for i in range(rollout.spec.num_speculative_tokens.bit_length())))
    methods_given = args.methods is not None
    methods = [m for m in (args.methods or ",".join(DRAFTING_METHODS)).split(",") if m]
    for m in methods:
        if m not in DRAFTING_METHODS:
            raise UserError(f"--methods: {m!r} is not a drafter; valid: {list(DRAFTING_METHODS)}")
    batch_sizes = parse_batch_sizes(args.batch_sizes)
    path = policy_path(args.model)
    probe = engine(args, path, 1)
    rows, history = [], None
    for bs in batch_sizes:
        rl = bs == "rl"
        batch, n = (rollout.max_num_seqs, rollout.n) if rl else (int(bs), 1)
        repeats = 1 if rl else args.repeats or (1 if args.quick else max(2, -(-MIN_PROMPTS // batch)))
        prompts, warmup = prompt_sets(probe, rl, batch, repeats, rollout, args.seed)
        max_tokens = args.rl_max_tokens if rl else args.max_tokens

        def run(llm, after_warmup=None):  # -> (RATE's figures, the engine's stats)
            got, stats = measure(llm, prompts, n, batch, max_tokens, args.seed, repeats, warmup, args.warmup_tokens,
                                 after_warmup=after_warmup)
            return {k: got[k] for k in RATE}, stats
        base, _ = run(engine(args, path, batch))
        common = {"batch_size": bs if rl else batch, "dtype": args.dtype, "threads": args.threads,
                  "baseline_tokens_per_s": base["tokens_per_s"]}
        rows.append({**common, "strategy": "off", "k": 0, **base, "speedup": 1.0})
        emit(rows[-1])
        rows += static_rows(args, path, batch, methods, ks, common, run)
        auto = {"mode": args.adaptive_mode, "cost_profile": args.profile,
                "drafters": auto_drafters(methods, methods_given)}
        llm = engine(args, path, batch, SpecConfig(method="auto", num_speculative_tokens=max(ks),
                                                   options={"auto": auto}))
        choices = llm.record_choices(history=bool(rl or args.history))
        # auto keeps what it learnt in the warm-up, but counts its choices afresh
        got, stats = run(llm, after_warmup=choices.reset)
        rows.append(auto_row(got, stats, choices, common, max(ks), rows, list(llm.drafter.drafters)))
        emit(rows[-1])
        if rl:
            history = choices.history
        if args.history:
            with open(args.history, "w" if bs == batch_sizes[0] else "a") as f:
                f.writelines(json.dumps({"batch_size": common["batch_size"], **h}) + "\n" for h in choices.history)
        if args.save_profile and (rl or bs == batch_sizes[-1]):
            llm.save_cost_profile(args.save_profile, {"path": str(path)})
    if args.out:
        plot(rows, history, args.out, args.dtype)
    return 0


def static_rows(args, path: str, batch: int, methods: list[str], ks: list[int], common: dict, run) -> list[dict]:
    """Every drafter at every k of --ks, each row emitted as it is measured; a drafter not built here emits its
    error once and is skipped."""
    rows = []
    for method in methods:
        for k in ks:
            try:
                llm = engine(args, path, batch, SpecConfig(method=method, num_speculative_tokens=k))
            except (FileNotFoundError, ValueError) as e:
                emit({**common, "strategy": method, "k": k, "error": str(e)[:200]})
                break
            got, stats = run(llm)
            rows.append({**common, "strategy": method, "k": k, **got,
                         "speedup": got["tokens_per_s"] / common["baseline_tokens_per_s"],
                         "acceptance_length": stats["acceptance_length"]})
            emit(rows[-1])
    return rows


def auto_row(got: dict, stats: dict, choices: Choices, common: dict, k: int, rows: list[dict],
             drafters: list[str]) -> dict:
    """auto's row: its rate, the drafter mix and mean k it chose, and how it compares with the best static row
    of the same batch size."""
    tps = got["tokens_per_s"]
    steps_rows = sum(v for d, v in choices.rows.items() if d != "k_sum")
    drafted = steps_rows - choices.rows.get("none", 0)
    static = [r for r in rows if r["batch_size"] == common["batch_size"] and is_static(r)]
    best = max(static, key=lambda r: r["speedup"], default=None)
    return {**common, "strategy": "auto", "k": k, **got, "speedup": tps / common["baseline_tokens_per_s"],
            "acceptance_length": stats["acceptance_length"],
            "mix": {d: round(v / max(steps_rows, 1), 3) for d, v in choices.rows.items() if d != "k_sum"},
            "mean_k": choices.rows.get("k_sum", 0) / max(drafted, 1),
            "best_static": f"{best['strategy']}@{best['k']}" if best else None,
            "vs_best_static": tps / best["tokens_per_s"] if best else None,
            "drafters": drafters}


def auto_drafters(methods: list[str], given: bool) -> tuple[str, ...]:
    """What auto chooses among: the drafters `specrl train`'s auto runs by default (SpecConfig.drafters) unless
    --methods names others. A drafter in auto's pool costs every step even when not chosen: MTP's modules
    observe every forward (it cannot defer), which the schedule does not price."""
    if given:
        return tuple(methods)
    return tuple(d for d in SpecConfig().options["auto"].drafters if d in methods) or tuple(methods)


def is_static(row: dict) -> bool:
    """A row of one drafter at a fixed k (not SD off's, not the adaptive engine's)."""
    return row["strategy"] in DRAFTING_METHODS


def is_auto(row: dict) -> bool:
    return row["strategy"] in METHODS and is_adaptive(row["strategy"])


def plot(rows: list[dict], history: list[dict] | None, png: str, dtype: str) -> None:
    try:
        plt = pyplot("--out")
    except MissingDependency as e:
        print(f"{e}: no {png}", file=sys.stderr)
        return
    sizes = list(dict.fromkeys(r["batch_size"] for r in rows))
    x = list(range(len(sizes)))
    fig, axes = plt.subplots(1, 2 if history else 1, figsize=(12 if history else 6, 4), squeeze=False)
    ax = axes[0][0]
    static = sorted({(r["strategy"], r["k"]) for r in rows if is_static(r)})
    for name, k in static:
        ys = [next((r["speedup"] for r in rows if r["batch_size"] == s and (r["strategy"], r["k"]) == (name, k)),
                   float("nan")) for s in sizes]
        ax.plot(x, ys, color="0.75", lw=0.8)
    best = [max((r["speedup"] for r in rows if r["batch_size"] == s and is_static(r)),
                default=float("nan")) for s in sizes]
    ax.plot(x, best, "k--", lw=1.5, label="best static (per batch size)")
    auto = [next((r["speedup"] for r in rows if r["batch_size"] == s and is_auto(r)), float("nan"))
            for s in sizes]
    ax.plot(x, auto, "r-o", lw=2, label="auto (adaptive)")
    ax.axhline(1.0, color="b", lw=0.8, label="SD off")
    ax.set_xticks(x, [str(s) for s in sizes])
    ax.set_xlabel("batch size")
    ax.set_ylabel("speedup over SD off")
    ax.set_title(f"static strategies (grey) vs adaptive, {dtype}")
    ax.legend(fontsize=8)
    if history:
        ax = axes[0][1]
        steps = range(len(history))
        names = sorted({d for h in history for d in h["mix"]})
        bottom = [0.0] * len(history)
        for name in names:
            frac = [h["mix"].get(name, 0) / max(h["running"], 1) for h in history]
            ax.bar(steps, frac, bottom=bottom, width=1.0, label=name)
            bottom = [b + f for b, f in zip(bottom, frac)]
        ax.set_ylabel("share of running sequences")
        ax.set_xlabel("engine step of the RL rollout")
        twin = ax.twinx()
        twin.plot(steps, [h["running"] for h in history], "k-", lw=1, label="running")
        twin.plot(steps, [h["mean_k"] * 8 for h in history], "r.", ms=2, label="mean k x 8")
        twin.set_ylabel("running sequences / mean k x 8")
        ax.legend(fontsize=7, loc="upper left")
        twin.legend(fontsize=7, loc="upper right")
        ax.set_title("what auto chose over one RL rollout")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png}", file=sys.stderr)
