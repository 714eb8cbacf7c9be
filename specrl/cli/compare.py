"""`specrl compare RUN_DIR... [--out FILE.png]`: runs of `specrl train` side by side, as a tracker shows them.

    specrl compare runs/sd_on runs/sd_off --out compare.png
    specrl compare "SD on=runs/a" "SD off=runs/b"          # NAME=DIR names a run (default: its directory)

Prints a table: per run, its steps, final and peak held-out accuracy, mean step, rollout and update seconds,
mean acceptance length, and the first run's step and rollout seconds over this run's (x > 1: this run is
faster); `--json` prints the rows as JSON lines instead. `--out` draws reward, held-out accuracy, the seconds
and acceptance length against the RL step in one figure (matplotlib), with a seventh panel, the drift probe
(online against frozen drafter on the same positions, KL to pi_0 on a second axis), when a run has it.

    specrl compare runs/before runs/after --same     # exit 1 unless every metric but the timings is equal

`--same` checks that two runs learnt the same thing (e.g. `rollout.spec.auto.mode=deterministic` before and
after a change): metrics.jsonl and eval.jsonl row by row, every key that is not a time (`*_s`, `*_per_s`).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError, pyplot
from ..pipeline.run_dir import is_run_dir, read_jsonl

# (metrics.jsonl key, panel title); held-out accuracy comes from eval.jsonl
PANELS = (("reward_mean", "train reward (mean)"), ("eval", "held-out accuracy"), ("step_s", "step seconds"),
          ("rollout_s", "rollout seconds"), ("train_s", "train (update) seconds"),
          ("acceptance_length", "acceptance length (tokens / target forward)"))
NO_SD_PANEL = ("logprob_diff", "engine vs trainer logprob, mean |diff| a token")


@dataclass
class Run:
    name: str
    rows: list[dict]  # metrics.jsonl
    evals: list[dict]  # eval.jsonl

    def mean(self, key: str) -> float:
        vals = [r[key] for r in self.rows if isinstance(r.get(key), (int, float))]
        return sum(vals) / len(vals) if vals else math.nan


def load_run(arg: str) -> Run:
    """NAME=DIR or DIR; a directory that is not a run (config.yaml + metrics.jsonl) or has no step is refused."""
    name, sep, path = arg.partition("=")
    if not sep or Path(arg).exists():
        name, path = "", arg
    path = Path(path)
    if not is_run_dir(path):
        what = "does not exist" if not path.exists() else "has no config.yaml and metrics.jsonl"
        raise UserError(f"{str(path)!r} is not a run directory ({what}): pass the out_dir of a `specrl train` run")
    rows = read_jsonl(path / "metrics.jsonl")
    if not rows:
        raise UserError(f"run {str(path)!r} has no finished step yet (metrics.jsonl is empty): compare it once "
                        "a step is logged")
    return Run(name or path.name or str(path), rows, read_jsonl(path / "eval.jsonl"))


def summary(run: Run, first: Run) -> dict:
    acc = [e["accuracy"] for e in run.evals if not math.isnan(e["accuracy"])]
    means = {key: run.mean(key) for key in ("step_s", "rollout_s", "train_s", "acceptance_length",
                                            "probe_accept_online", "probe_accept_frozen", "probe_kl_pi0")}
    return {"run": run.name, "steps": run.rows[-1]["step"], "final_accuracy": acc[-1] if acc else None,
            "peak_accuracy": max(acc) if acc else None, **means,
            "step_speedup": first.mean("step_s") / means["step_s"],
            "rollout_speedup": first.mean("rollout_s") / means["rollout_s"]}


COLUMNS = (("run", "run", "{}"), ("steps", "steps", "{}"), ("final_accuracy", "acc final", "{:.3f}"),
           ("peak_accuracy", "acc peak", "{:.3f}"), ("step_s", "step s", "{:.2f}"),
           ("rollout_s", "rollout s", "{:.2f}"), ("train_s", "train s", "{:.2f}"),
           ("acceptance_length", "accept len", "{:.2f}"), ("probe_accept_online", "probe online", "{:.3f}"),
           ("probe_accept_frozen", "probe frozen", "{:.3f}"), ("probe_kl_pi0", "KL pi0", "{:.4f}"),
           ("step_speedup", "step x", "{:.2f}"),
           ("rollout_speedup", "rollout x", "{:.2f}"))


def table(rows: list[dict]) -> str:
    cells = [[head for _, head, _ in COLUMNS]]
    cells += [["-" if r[key] is None or r[key] != r[key] else fmt.format(r[key]) for key, _, fmt in COLUMNS]
              for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in cells]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def plot(runs: list[Run], out: Path) -> Path:
    plt = pyplot("--out")
    from matplotlib.ticker import MaxNLocator
    probed = any("probe_accept_online" in r for run in runs for r in run.rows)
    fig, axes = plt.subplots(2, 4 if probed else 3, figsize=(20 if probed else 15, 8))
    if probed:
        draw_probes(axes.flat[3], runs)
        axes.flat[7].axis("off")
    panels = [ax for i, ax in enumerate(axes.flat) if not probed or i not in (3, 7)]
    drafted = any(r.get("acceptance_length", 1) > 1 for run in runs for r in run.rows)
    # runs without SD have acceptance 1 throughout: that panel shows engine against trainer logprobs instead
    for ax, (key, title) in zip(panels, PANELS if drafted else PANELS[:-1] + (NO_SD_PANEL,)):
        for run in runs:
            if key == "eval":
                line, = ax.plot([e["step"] for e in run.evals], [e["accuracy"] for e in run.evals], "o-",
                                label=run.name)
                graded = [e for e in run.evals if e.get("reward_mean") is not None
                          and abs(e["reward_mean"] - e["accuracy"]) > 1e-9]
                if graded:  # a graded reward (e.g. the steps task's ledger): its held-out mean, dashed
                    ax.plot([e["step"] for e in graded], [e["reward_mean"] for e in graded], "s--",
                            color=line.get_color(), label=f"{run.name}: mean reward")
                    title = "held-out accuracy (solid), mean reward (dashed)"
            else:
                pts = [(r["step"], r[key]) for r in run.rows if isinstance(r.get(key), (int, float))]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=run.name)
        ax.set_title(title)
        ax.set_xlabel("RL step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes.flat[0].legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def draw_probes(ax, runs: list[Run]) -> None:
    """The drift probe of every run that has it on one pair of axes (run_dir.draw_probe, lines named by run)."""
    from matplotlib.ticker import MaxNLocator

    from ..pipeline.run_dir import draw_probe, probe_legend
    kl = ax.twinx()
    for run in runs:
        probed = [(r["step"], r) for r in run.rows if "probe_accept_online" in r]
        if probed:
            draw_probe(ax, kl, probed, f"{run.name}: ")
    probe_legend(ax, kl)
    ax.set_title("drift probe: online vs frozen drafter (same positions); KL to pi_0")
    ax.set_xlabel("RL step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)


def is_timing(key: str) -> bool:
    return key.endswith("_s") or key.endswith("_per_s") or key in ("time", "wall_time")


def differences(a: list[dict], b: list[dict]) -> list[str]:
    """Where two runs' rows differ, timings aside: a row count, or (row, key, one value, the other)."""
    found = [f"{len(a)} rows against {len(b)}"] if len(a) != len(b) else []
    return found + [f"row {i} {key}: {x.get(key)!r} != {y.get(key)!r}" for i, (x, y) in enumerate(zip(a, b))
                    for key in sorted(set(x) | set(y)) if not is_timing(key) and x.get(key) != y.get(key)]


def same(runs: list[Run]) -> int:
    if len(runs) != 2:
        raise UserError(f"--same compares two runs, got {len(runs)}: pass RUN_A RUN_B")
    a, b = runs
    found = {"metrics.jsonl": differences(a.rows, b.rows), "eval.jsonl": differences(a.evals, b.evals)}
    for name, diffs in found.items():
        keys = sorted({k for r in (a.rows + b.rows if name == "metrics.jsonl" else a.evals + b.evals) for k in r
                       if not is_timing(k)})
        print(json.dumps({"file": name, "keys_compared": len(keys), "equal": not diffs, "differences": diffs[:10]}))
    return 0 if not any(found.values()) else 1


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="specrl compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run directories of `specrl train` (NAME=DIR to name one)")
    ap.add_argument("--out", type=Path, default=None, help="write the figure to this PNG")
    ap.add_argument("--json", action="store_true", help="JSON lines instead of the table")
    ap.add_argument("--same", action="store_true", help="two runs: exit 1 unless every metric and eval row is "
                    "equal, timings aside (one JSON line per file)")
    args = ap.parse_args(argv)
    runs = [load_run(a) for a in args.runs]
    if args.same:
        return same(runs)
    rows = [summary(r, runs[0]) for r in runs]
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        print(table(rows))
        print(f"(means over each run's steps; x: {runs[0].name}'s seconds over the run's, > 1 is faster)")
    if args.out is not None:
        print(f"figure: {plot(runs, args.out)}", file=sys.stderr)
    return 0
