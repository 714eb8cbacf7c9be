"""Training throughput, packed against padded micro-batches, on the default run's batches.

Record a few steps' batches from a short default `specrl train` (the shipped policy, the chain task, the
same seed), then time the policy update (forward, backward, optimizer step: `PolicyTrainer.step`) on each,
packed (`optim.packing=true`) and padded, in one process, alternating which goes first (ABBA), repeated.
The score is response tokens per second: the batch's response tokens over the update's wall time. A
synthetic batch of equal-length rows (no padding at all) shows what packing costs where there is nothing to
remove. Prints JSON lines; with --out a bar chart.

    specrl bench packing-throughput --record runs/packing/batches.pt --steps 3   # ~1-2 min a step
    specrl bench packing-throughput --batches runs/packing/batches.pt --repeats 3 --out out.png
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import tempfile
import time

import torch

from specrl.config import load_config
from specrl.config.files import argv_overrides
from specrl.config.renamed import rename
from specrl.errors import MissingFileError, UserError, pyplot
from specrl.model import load_model
from specrl.tasks import default_policy_path
from specrl.trainer.batch import TrainBatch
from specrl.config.run import TrainConfig
from specrl.trainer.trainer import PolicyTrainer


def record(out: str, steps: int, overrides: list[str]) -> None:
    """Runs `specrl train` for `steps` steps and saves every TrainBatch its learner received. The run's own
    directory is a byproduct: a temporary one, unless the overrides name an out_dir."""
    import specrl.pipeline.steps as steps_mod
    from specrl.pipeline.run import train
    batches, collate = [], steps_mod.collate

    def recording(*args, **kwargs):
        batch = collate(*args, **kwargs)
        batches.append(tuple(batch))
        torch.save(batches, out)  # after each step: a cut-short run keeps what it recorded
        return batch
    steps_mod.collate = recording
    try:
        with tempfile.TemporaryDirectory() as run_dir:
            train(load_config(TrainConfig, None, [
                f"out_dir={run_dir}/run", f"schedule.max_steps={steps}", "schedule.eval_every=0", "progress=false",
                "num_threads=1", "tensorboard=false", "plots=false", "data.eval_size=1", *argv_overrides(overrides)]))
    finally:
        steps_mod.collate = collate


def equal_lengths(batch: TrainBatch, length: int) -> TrainBatch:
    """`batch`'s rows cut (or kept) to exactly `length` positions: a batch with no padding to remove."""
    keep = batch.lengths >= length
    cut = TrainBatch(*(t[keep, :length] for t in batch[:4]), batch.advantages[keep],
                     torch.full((int(keep.sum()),), length))
    return cut


def trainers(cfg: TrainConfig) -> dict[str, PolicyTrainer]:
    policy = load_model(default_policy_path())
    out = {}
    for name, packing in (("packed", True), ("padded", False)):
        optim = copy.deepcopy(cfg.optim)
        optim.packing = packing
        out[name] = PolicyTrainer(copy.deepcopy(policy), cfg.algorithm, optim, 1000, cfg.rollout.temperature,
                                  cfg.budget.max_tokens)
    return out


def timed(trainer: PolicyTrainer, batch: TrainBatch) -> float:
    t0 = time.perf_counter()
    trainer.step(batch)
    return time.perf_counter() - t0


def measure(batches: dict[str, TrainBatch], repeats: int, cfg: TrainConfig) -> dict[str, dict[str, list[float]]]:
    arms = trainers(cfg)
    warm = min(batches.values(), key=lambda b: int(b.lengths.sum()))  # the cheapest
    for t in arms.values():  # warm-up: one-off allocation and first-touch costs, untimed
        t.step(warm)
    times = {name: {arm: [] for arm in arms} for name in batches}
    for r in range(repeats):
        for name, batch in batches.items():
            order = list(arms) if r % 2 == 0 else list(arms)[::-1]  # ABBA: neither arm always runs first
            for arm in order:
                times[name][arm].append(timed(arms[arm], batch))
                row = {"batch": name, "arm": arm, "repeat": r, "update_s": times[name][arm][-1],
                       "load1": os.getloadavg()[0]}
                print(json.dumps(row), flush=True)
    return times


def describe(batch: TrainBatch) -> dict:
    lengths = batch.lengths.float()
    resp = batch.mask.sum(1)  # [N] response tokens a row
    return {"rows": batch.num_rows, "response_tokens": int(resp.sum()), "real_tokens": int(lengths.sum()),
            "response_p50": float(resp.median()), "response_p99": float(resp.quantile(0.99)),
            "response_max": int(resp.max()), "learning_rows": int((batch.advantages != 0).sum())}


def plot(summary: list[dict], path: str) -> None:
    plt = pyplot("--out")
    names = [s["batch"] for s in summary]
    x = range(len(names))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for off, arm in ((-0.2, "padded"), (0.2, "packed")):
        ax.bar([i + off for i in x], [s[f"{arm}_tok_s"] for s in summary], 0.4, label=arm)
    for i, s in enumerate(summary):
        ax.annotate(f"{s['speedup']:.2f}x", (i, max(s["packed_tok_s"], s["padded_tok_s"])), ha="center",
                    va="bottom")
    ax.set_xticks(list(x), names, fontsize=8)
    ax.set_ylabel("response tokens / s of the update")
    ax.set_title("policy update, packed vs padded micro-batches (median of repeats)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


RENAMED = {"--png": "--out"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specrl bench packing-throughput", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", help="record batches of a short default run into this file, then stop")
    ap.add_argument("--steps", type=int, default=3, help="--record: RL steps to record")
    ap.add_argument("--batches", help="batches recorded by --record")
    ap.add_argument("--repeats", type=int, default=3, help="timed updates per batch and arm")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--equal-length", type=int, default=64, help="rows of the synthetic no-padding batch (0: none)")
    ap.add_argument("--out", help="PNG of the packed and padded throughput per batch (needs matplotlib)")
    ap.add_argument("overrides", nargs="*", help="--record: run config overrides, full keys (rollout.n=4)")
    args = ap.parse_args(rename(list(argv or []), RENAMED, "specrl bench packing-throughput"))
    torch.set_num_threads(args.threads)
    if args.record:
        record(args.record, args.steps, args.overrides)
        return 0
    if not args.batches:
        raise UserError("pass --batches FILE (written by --record FILE), or --record FILE to write one")
    if not os.path.isfile(args.batches):
        raise MissingFileError(f"--batches {args.batches!r} does not exist; write it with --record {args.batches}")
    if args.out:
        pyplot("--out")  # before the timings: a missing matplotlib ends here
    cfg = load_config(TrainConfig, None, [])
    recorded = [TrainBatch(*t) for t in torch.load(args.batches)]
    batches = {f"step{i + 1}": b for i, b in enumerate(recorded)}
    if args.equal_length:
        batches[f"equal_len{args.equal_length}"] = equal_lengths(recorded[0], args.equal_length)
    load0 = os.getloadavg()
    times = measure(batches, args.repeats, cfg)
    summary = []
    for name, batch in batches.items():
        info = describe(batch)
        med = {arm: statistics.median(ts) for arm, ts in times[name].items()}
        row = {"batch": name, **info, "packed_s": med["packed"], "padded_s": med["padded"],
               "packed_tok_s": info["response_tokens"] / med["packed"],
               "padded_tok_s": info["response_tokens"] / med["padded"], "speedup": med["padded"] / med["packed"],
               # each repeat's packed and padded runs are adjacent in time: their ratio sees the same load
               "pair_speedups": [a / b for a, b in zip(times[name]["padded"], times[name]["packed"])]}
        summary.append(row)
        print(json.dumps({"summary": True, **row}), flush=True)
    recorded_names = [n for n in batches if n.startswith("step")]
    total = {arm: sum(statistics.median(times[n][arm]) for n in recorded_names) for arm in ("packed", "padded")}
    tokens = sum(describe(batches[n])["response_tokens"] for n in recorded_names)
    print(json.dumps({"overall": True, "packed_tok_s": tokens / total["packed"],
                      "padded_tok_s": tokens / total["padded"], "speedup": total["padded"] / total["packed"],
                      "threads": args.threads, "repeats": args.repeats, "load1_start": load0[0],
                      "load1_end": os.getloadavg()[0], "cpus": os.cpu_count(), "torch": torch.__version__}),
          flush=True)
    if args.out:
        plot(summary, args.out)
    return 0
