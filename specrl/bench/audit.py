"""`specrl bench audit`: the sampler audit's calibration, power and cost, as the default run sees it.

Every measurement is a sequence of steps shaped like the default run's: the chain task's 8 prompts of step s,
of which the groups a run's step audits (every group by default, rollout.audit_groups=null; `--groups 2`, a
`choose_groups` draw on the seed and step) are generated (8 samples each, seeded per step and prompt) by the
engine on one path, and audited under the shipped policy at temperature 1 (`score_completions`, what the trainer
computes). A path's steps are one e-process, as one run's are. Each row keeps every group's evidence, so the
summary also replays a run that audits 2 groups a step on the same samples. Rows go to a JSONL file (resumable:
a step already there is skipped).

    specrl bench audit calibration --out FILE --paths off ngram suffix --steps 150 --max-tokens 32
    specrl bench audit power --out FILE --faults temp_1.1 accept_all --steps 10 --max-tokens 1100
    specrl bench audit dumps --out FILE DUMP.jsonl ...      (another engine's completions, 64 rows a step)
    specrl bench audit summary --rows FILE ... [--out FILE.png] [--runs RUN_DIR ...]

The faults are audit_steps.py's. The summary gives steps to the alarm for the e-process (alpha 1e-3), the same
for the 2 groups a step audited before (`steps_e_2_groups`), the PIT z's old windowed alarm (5 steps, Stouffer,
|z| > 3.29), and the audit's share of each train step (`sampler_share` of run directories).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import time
from pathlib import Path

import torch

from specrl.config.renamed import rename
from specrl.audit import EProcess, StepEvidence, TokenScorer, choose_groups, score_completions, step_evidence
from specrl.errors import MissingFileError
from specrl.pipeline.run_dir import read_jsonl
from specrl.bench.audit_cost import cost
from specrl.bench.audit_steps import FAULTS, N, PROMPTS, Steps, broken_verify, group_fields, paths  # noqa: F401

ALPHA = 1e-3
FEW = 2  # the groups a step audited before every row was: the replayed column
PIT_WINDOW, PIT_Z = 5, 3.2905267314918945  # the PIT's former alarm: Stouffer over 5 steps, two-sided 1e-3


def _done(out: Path, key: str, name: str) -> list[dict]:
    return sorted((r for r in read_jsonl(out) if r.get(key) == name), key=lambda r: r["step"])


def _write(out: Path, row: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as f:
        f.write(json.dumps(row) + "\n")


def _row(ev: StepEvidence, **kw) -> dict:
    return {**kw, "tokens": ev.tokens, "impossible": ev.impossible, "log_e_step": ev.log_e, "z": ev.z,
            "log_bets": ev.log_bets}


def _steps(args, path: str) -> Steps:
    return Steps(path, args.seed, args.max_tokens, args.chunk, args.groups, args.dtype)


def calibration(args) -> None:
    for path in args.paths:
        have = {r["step"] for r in _done(args.out, "path", path) if r.get("dtype") == args.dtype}
        todo = [s for s in range(args.steps) if s not in have]
        steps = _steps(args, path) if todo else None
        for k in range(0, len(todo), args.chunk):
            t0 = time.perf_counter()
            chunk = todo[k:k + args.chunk]
            for s, (chosen, groups, ev, _) in zip(chunk, steps(chunk)):
                _write(args.out, _row(ev, kind="calibration", path=path, dtype=args.dtype, step=s,
                                      max_tokens=args.max_tokens, s=(time.perf_counter() - t0) / len(chunk),
                                      **group_fields(chosen, groups)))


def power(args) -> None:
    from specrl.engine import replaced_verify
    for fault in args.faults:
        path, sampling = FAULTS[fault]
        # a sampling fault runs SD off, where no verify runs; the others replace verify under `auto`
        with replaced_verify(broken_verify(fault)) if path != "off" else contextlib.nullcontext():
            power_steps(args, fault, path, sampling)


def power_steps(args, fault: str, path: str, sampling: dict) -> None:
    """`fault`'s steps not yet in --out, until the e-process rang (or --steps ran out; every step with
    --all-steps, for the replay of fewer groups)."""
    rows = _done(args.out, "fault", fault)
    todo = [s for s in range(args.steps) if s not in {r["step"] for r in rows}]
    steps = None
    for k in range(0, len(todo), args.chunk):
        if rows and alarms(rows)["steps_e"] is not None and not args.all_steps:
            break
        steps = steps or _steps(args, path)
        t0 = time.perf_counter()
        chunk = todo[k:k + args.chunk]
        for s, (chosen, groups, ev, kl) in zip(chunk, steps(chunk, **sampling)):
            row = _row(ev, kind="power", fault=fault, path=path, step=s, max_tokens=args.max_tokens,
                       s=(time.perf_counter() - t0) / len(chunk), kl=kl, **group_fields(chosen, groups))
            _write(args.out, row)
            rows.append(row)


def dumps(args) -> None:
    """Another engine's completions (e.g. vLLM's, docs/results/vllm_dumps/), --rows-per-step rows a step."""
    from specrl.model import load_model
    from specrl.tasks import default_policy_path
    model = load_model(str(args.model or default_policy_path())).eval()
    for dump in args.files:
        rows = read_jsonl(dump)
        size = args.rows_per_step
        for s in range(len(rows) // size):
            part = rows[s * size:(s + 1) * size]
            ev = step_evidence(score_completions(model, TokenScorer(args.temperature, seed=s),
                                                 [r["prompt_ids"] for r in part], [r["completion_ids"] for r in part]))
            _write(args.out, _row(ev, kind="dump", fault=Path(dump).stem, step=s, rows=size))


def few_groups(row: dict, seed: int = 0) -> dict:
    """`row` as a run auditing FEW groups a step would have seen it: the `choose_groups` draw of its step among
    the groups it kept (the same draw as rows.py's; a row without per-group evidence is returned as it is)."""
    if "group_bets" not in row or len(row["groups"]) <= FEW:
        return row
    from specrl.pipeline.steps import AUDIT_SALT
    from specrl.trainer.data import step_seed
    keep = set(choose_groups(PROMPTS, FEW, step_seed(seed, row["step"], salt=AUDIT_SALT)))
    at = [j for j, g in enumerate(row["groups"]) if g in keep]
    bets = torch.tensor([row["group_bets"][j] for j in at], dtype=torch.float64).sum(0).tolist()
    return {**row, "log_bets": bets, "tokens": sum(row["group_tokens"][j] for j in at),
            "impossible": sum(row["group_impossible"][j] for j in at)}


def merged(rows: list[dict], k: int) -> list[dict]:
    """`rows` in step order, every `k` consecutive ones as one step (their tokens in the same order, so the
    e-process after each merged step is the one after its last row): rows of 2 groups a step replayed as a run
    that audits 2k groups a step sees them, at the checks it makes."""
    rows = sorted(rows, key=lambda r: r["step"])
    out = []
    for i in range(0, len(rows), k):
        part = rows[i:i + k]
        bets = torch.tensor([r["log_bets"] for r in part], dtype=torch.float64).sum(0).tolist()
        z = sum(r["z"] for r in part) / math.sqrt(len(part))
        out.append({**part[-1], "step": i // k, "log_bets": bets, "tokens": sum(r["tokens"] for r in part),
                    "impossible": sum(r["impossible"] for r in part), "z": z})
    return out


def alarms(rows: list[dict]) -> dict:
    """Steps (1-based) to the e-process's alarm at ALPHA and to the PIT's windowed alarm; None: not within."""
    e, window, steps_e, steps_pit = EProcess(), [], None, None
    for i, r in enumerate(sorted(rows, key=lambda r: r["step"]), start=1):
        e.update(StepEvidence(r["log_bets"], r["tokens"], r["impossible"], r["z"], 1.0, 1.0))
        window = (window + [r["z"]])[-PIT_WINDOW:]
        if steps_e is None and e.log_e >= math.log(1 / ALPHA):
            steps_e = i
        if steps_pit is None and abs(sum(window) / math.sqrt(len(window))) > PIT_Z:
            steps_pit = i
    return {"steps_e": steps_e, "steps_pit": steps_pit, "max_log10_e": e.max_log_e / math.log(10),
            "steps": len(rows), "tokens": e.tokens}


def summary(args) -> None:
    missing = [str(f) for f in args.rows if not Path(f).is_file()]
    if missing:
        raise MissingFileError(f"--rows {missing[0]!r} does not exist; pass the --out files of `specrl bench audit "
                               "calibration`, `power` or `dumps`")
    rows = [r for f in args.rows for r in read_jsonl(f)]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        name = r.get("path") if r["kind"] == "calibration" else r["fault"]
        groups.setdefault((r["kind"], name + (f"@{r['dtype']}" if r.get("dtype") else "")), []).append(r)
    groups = {k: list({r["step"]: r for r in rs}.values()) for k, rs in groups.items()}  # a step once (the last)
    if args.merge > 1:
        groups = {k: merged(rs, args.merge) for k, rs in groups.items()}
    for (kind, name), rs in sorted(groups.items()):
        a = alarms(rs)
        few = alarms([few_groups(r) for r in rs]) if any("group_bets" in r for r in rs) else None
        a.update({f"steps_e_{FEW}_groups": few["steps_e"], f"max_log10_e_{FEW}_groups": few["max_log10_e"]}
                 if few else {})
        z = [r["z"] for r in rs]
        kl = [r["kl"] for r in rs if r.get("kl") is not None]
        print(json.dumps({"kind": kind, "name": name, **a, "z_first": round(z[0], 2),
                          "z_mean": round(sum(z) / len(z), 3), "tokens_a_step": round(a["tokens"] / len(rs)),
                          **({"kl_sum": sum(kl), "kl_steps": len(kl)} if kl else {})}))
    for run in args.runs:
        m = read_jsonl(Path(run) / "metrics.jsonl")
        share = [r["sampler_s"] / r["step_s"] for r in m if "sampler_s" in r]
        print(json.dumps({"kind": "cost", "run": str(run), "steps": len(m), "sampler_s": [r.get("sampler_s") for r in m],
                          "step_s": [r["step_s"] for r in m], "share": share,
                          "rows": [r.get("sampler_rows") for r in m],
                          "share_total": sum(r.get("sampler_s", 0) for r in m) / sum(r["step_s"] for r in m)}))
    if args.out:
        plot(groups, args.out)


def plot(groups: dict, png: Path) -> None:
    """Each exact path's e-process (running maximum, log10) against 1/alpha, over its steps."""
    from specrl.errors import pyplot
    plt = pyplot("--out")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for (kind, name), rs in sorted(groups.items()):
        if kind != "calibration":
            continue
        e, peak = EProcess(), []
        for r in sorted(rs, key=lambda r: r["step"]):
            e.update(StepEvidence(r["log_bets"], r["tokens"], r["impossible"], r["z"], 1.0, 1.0))
            peak.append(e.max_log_e / math.log(10))
        ax.plot(range(1, len(peak) + 1), peak, lw=1, label=f"{name} ({len(rs)} steps)")
    ax.axhline(math.log10(1 / ALPHA), color="r", ls="--", lw=1, label=f"alarm: 1/alpha = {1 / ALPHA:g}")
    ax.set_xlabel("audited step (a default run's rows)")
    ax.set_ylabel("running maximum of log10 e-value")
    ax.set_title("sampler audit on exact samplers: the e-process never nears 1/alpha")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


MODES = {"calibration": "exact samplers (SD off and each shipped drafter): the e-process must stay low",
         "power": "injected faults: steps until the e-process alarms",
         "dumps": "another engine's completions (JSONL of prompt_ids and completion_ids), 64 rows a step",
         "summary": "steps to the alarm per path or fault, from rows these wrote; a PNG with --out",
         "cost": "seconds a token of the audit's scoring against a forward and backward, at a model's vocabulary"}
RENAMED = {"--png": "--out"}  # summary's plot


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specrl bench audit", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    for name in ("calibration", "power", "dumps"):
        p = sub.add_parser(name, help=MODES[name], description=MODES[name])
        p.add_argument("--out", type=Path, required=True, help="the JSONL of rows, one a step (resumable)")
        p.add_argument("--seed", type=int, default=0, help="seed of the steps' prompts and samples")
        p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
        if name != "dumps":
            p.add_argument("--steps", type=int, default=10, help="steps of the e-process")
            p.add_argument("--max-tokens", type=int, default=1100, help="tokens per sample at most")
            p.add_argument("--chunk", type=int, default=8, help="steps generated in one engine call (each step's "
                           "samples are seeded alone, so the rows do not depend on it)")
            p.add_argument("--groups", type=int, default=None, help=f"groups audited a step, of {PROMPTS} (default: "
                           "all, as rollout.audit_groups=null; the summary replays 2 from the same rows)")
            p.add_argument("--dtype", default=None, help="the engine's dtype: float32, bfloat16 (default: auto); "
                           "the audit scores in fp32 either way")
    sub.choices["calibration"].add_argument("--paths", nargs="+", default=list(paths()),
                                            help="the engine paths: off and the shipped drafters (default: all)")
    sub.choices["power"].add_argument("--faults", nargs="+", default=list(FAULTS), choices=list(FAULTS),
                                      help="the faults to inject (default: all)")
    sub.choices["power"].add_argument("--all-steps", action="store_true", help="run every step, not only until the "
                                      "e-process rang (the 2-group replay needs more)")
    sub.choices["dumps"].add_argument("files", nargs="+", type=Path, help="JSONL dumps of another engine")
    sub.choices["dumps"].add_argument("--model", default=None, help="the policy directory (default: shipped)")
    sub.choices["dumps"].add_argument("--temperature", type=float, default=1.0,
                                      help="the temperature the dumps were sampled at")
    sub.choices["dumps"].add_argument("--rows-per-step", type=int, default=PROMPTS * N,
                                      help=f"rows a step (default {PROMPTS * N}: a default run's step, every row)")
    c = sub.add_parser("cost", help=MODES["cost"], description=MODES["cost"])
    c.add_argument("--model", default=None, help="the policy directory (default: shipped; e.g. SmolLM2's)")
    c.add_argument("--rows", type=int, default=8, help="rows of the batch")
    c.add_argument("--tokens", type=int, default=256, help="tokens a row")
    c.add_argument("--dtype", default=None, help="the model's dtype (default float32)")
    c.add_argument("--seed", type=int, default=0, help="seed of the random rows")
    c.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    s = sub.add_parser("summary", help=MODES["summary"], description=MODES["summary"])
    s.add_argument("--rows", type=Path, nargs="*", default=[], help="JSONL files of calibration/power/dumps")
    s.add_argument("--runs", type=Path, nargs="*", default=[], help="`specrl train` run directories: the audit's "
                   "share of their step")
    s.add_argument("--out", type=Path, default=None, help="PNG of the e-processes (needs matplotlib)")
    s.add_argument("--merge", type=int, default=1, help="replay every K rows as one step (rows of 2 groups a step "
                   "with --merge 4: a run auditing all 8)")
    args = ap.parse_args(rename(list(argv or []), RENAMED, "specrl bench audit"))
    if args.mode != "summary":
        torch.set_num_threads(args.threads)
    {"calibration": calibration, "power": power, "dumps": dumps, "summary": summary, "cost": cost}[args.mode](args)
    return 0
