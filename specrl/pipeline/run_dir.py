"""The run directory of `specrl train`: what users open to see how a run went.

    config.yaml       the full resolved config (a resume starts from it)
    metrics.jsonl     one row per RL step
    eval.jsonl        one row per held-out evaluation
    tb/               TensorBoard events (if tensorboard is installed)
    plots/*.png       reward/accuracy, acceptance length, step-time breakdown (if matplotlib is installed)
    checkpoints/      see specrl.trainer.checkpoint
    rollout_trace.jsonl     with rollout.trace=true: one engine-trace row per engine step, tagged rl_step
    rollout_workload.jsonl  with rollout.trace=true: each step's prompt/response lengths and CPU times
    precision.json    with dtype auto: the dtype chosen and the probe's figures (specrl/model/precision.py)
"""
from __future__ import annotations

import json
import shutil
import warnings
from functools import partial
from pathlib import Path

from ..config import dump_yaml
from ..errors import MissingDependency, UserError, pyplot
from ..io import atomic_write_text

TIME_KEYS = ("rollout_s", "reward_s", "train_s", "sync_s")
TRACE_FILE, WORKLOAD_FILE = "rollout_trace.jsonl", "rollout_workload.jsonl"
PRECISION_FILE = "precision.json"
SAMPLES_FILE = "samples.jsonl"  # a few completions per step, with their rewards (TrainConfig.log_samples)
LOG_FILES = ("metrics.jsonl", "eval.jsonl", WORKLOAD_FILE, TRACE_FILE, SAMPLES_FILE)


def is_run_dir(path: str | Path) -> bool:
    path = Path(path)
    return (path / "config.yaml").is_file() and (path / "metrics.jsonl").is_file()


def read_jsonl(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class RunDir:
    def __init__(self, path: str | Path, tensorboard: bool = True):
        self.path = Path(path)
        self._tb_enabled, self._tb = tensorboard, None

    @classmethod
    def create(cls, path: str | Path, cfg, tensorboard: bool = True) -> "RunDir":
        """A fresh run in `path`. A directory left by an attempt killed before its first step is reused with its
        logs emptied (a stale step-0 eval row or trace must not join the new run's); one with steps refuses."""
        path = Path(path)
        if is_run_dir(path):
            if read_jsonl(path / "metrics.jsonl"):
                raise FileExistsError(f"out_dir {str(path)!r} already holds a run: continue it with "
                                      f"resume={path}, or pick a new out_dir")
            shutil.rmtree(path / "tb", ignore_errors=True)
            for name in LOG_FILES[1:]:
                (path / name).unlink(missing_ok=True)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"out_dir={str(path)!r} cannot be created ({e.strerror or e}): pick a directory you "
                            "can write to") from e
        dump_yaml(cfg, path / "config.yaml")
        (path / "metrics.jsonl").write_text("")
        return cls(path, tensorboard)

    @classmethod
    def open(cls, path: str | Path, tensorboard: bool = True) -> "RunDir":
        if not is_run_dir(path):
            raise FileNotFoundError(f"resume={str(path)!r} is not a run directory (expected config.yaml and "
                                    "metrics.jsonl written by `specrl train`); pass the out_dir of an earlier run")
        return cls(path, tensorboard)

    def record_precision(self, choice: dict) -> None:
        """precision.json: the dtype `auto` chose and the probe's figures (specrl.model.precision.Precision)."""
        atomic_write_text(self.path / PRECISION_FILE, json.dumps(choice, indent=1) + "\n")

    def truncate(self, step: int) -> None:
        """Drops rows past `step` (written after the checkpoint a resume starts from)."""
        for name, key in zip(LOG_FILES, ("step", "step", "step", "rl_step", "step")):
            if not (self.path / name).exists():
                continue
            rows = [r for r in read_jsonl(self.path / name) if r[key] <= step]
            atomic_write_text(self.path / name, "".join(json.dumps(r) + "\n" for r in rows))

    def log(self, row: dict, file: str = "metrics.jsonl", tensorboard: bool = True) -> None:
        with open(self.path / file, "a") as f:
            f.write(json.dumps(row) + "\n")
        if tensorboard and self._tb is None and self._tb_enabled:
            try:
                from torch.utils.tensorboard import SummaryWriter
                self._tb = SummaryWriter(str(self.path / "tb"))
            except ImportError:
                warnings.warn("tensorboard is not installed: no TensorBoard events (pip install tensorboard)")
                self._tb_enabled = False
        if tensorboard and self._tb is not None:
            prefix = "eval/" if file == "eval.jsonl" else "train/"
            for k, v in row.items():
                if k != "step" and isinstance(v, (int, float)):
                    self._tb.add_scalar(prefix + k, v, row["step"])
            self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def audit_alpha(self) -> float:
        """The run's rollout.audit_alpha (config.yaml)."""
        import yaml
        cfg = yaml.safe_load((self.path / "config.yaml").read_text()) or {}
        return float((cfg.get("rollout") or {}).get("audit_alpha", 1e-3))

    def plot(self) -> list[Path]:
        """PNG plots of the run so far; none (with a warning) without matplotlib."""
        try:
            plt = pyplot("plotting")
        except MissingDependency as e:
            warnings.warn(f"{e}: no plots")
            return []
        rows, evals = read_jsonl(self.path / "metrics.jsonl"), read_jsonl(self.path / "eval.jsonl")
        if not rows:
            return []
        out = self.path / "plots"
        out.mkdir(exist_ok=True)
        steps = [r["step"] for r in rows]
        files = []
        panels = [("reward", _draw_reward), ("acceptance_length", _draw_acceptance), ("step_time", _draw_step_time)]
        if any("probe_accept_online" in r for r in rows):
            panels.append(("drift_probe", _draw_probe))
        if any("sampler_e" in r for r in rows):
            panels.append(("sampler_audit", partial(_draw_sampler, alpha=self.audit_alpha())))
        for name, draw in panels:
            fig, ax = plt.subplots(figsize=(7, 4))
            draw(ax, steps, rows, evals)
            ax.set_xlabel("RL step")
            ax.grid(alpha=0.3)
            fig.tight_layout()
            fig.savefig(out / f"{name}.png", dpi=100)
            plt.close(fig)
            files.append(out / f"{name}.png")
        return files


def _draw_reward(ax, steps, rows, evals):
    ax.plot(steps, [r["reward_mean"] for r in rows], label="train reward (mean)")
    if evals:
        ax.plot([e["step"] for e in evals], [e["accuracy"] for e in evals], "o-", label="held-out accuracy")
    ax.set_ylabel("reward / accuracy")
    ax.legend()


def _draw_acceptance(ax, steps, rows, evals):
    ax.plot(steps, [r["acceptance_length"] for r in rows])
    ax.set_ylabel("acceptance length (tokens / target forward)")


def _draw_step_time(ax, steps, rows, evals):
    if any("policy_lag" in r for r in rows):  # async: the stages overlap, so they are not stacked
        for key in ("step_s", "rollout_s", "train_s"):
            ax.plot(steps, [r.get(key, 0.0) for r in rows], "o-", label=key.removesuffix("_s"))
        ax.set_ylabel("seconds per step (async: rollout and train overlap)")
        ax.legend()
        return
    bottom = [0.0] * len(rows)
    for key in TIME_KEYS:
        vals = [r.get(key, 0.0) for r in rows]
        ax.bar(steps, vals, bottom=bottom, label=key.removesuffix("_s"), width=0.9)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("seconds per step")
    ax.legend()


def _draw_sampler(ax, steps, rows, evals, alpha: float):
    """The sampler audit: the run's e-process after each audited step against 1/alpha (specrl.audit)."""
    from ..audit.plot import draw_eprocess
    audited = [(s, r) for s, r in zip(steps, rows) if "sampler_e" in r]
    draw_eprocess(ax, [s for s, _ in audited], [r["sampler_e"] for _, r in audited], alpha)


def _draw_probe(ax, steps, rows, evals):
    """The drift probe (drafters/training/probe.py): expected accepted tokens of the online drafter that served
    each step, the newest one and the frozen step-0 copy on the same positions, and KL(pi_t || pi_0)."""
    kl = ax.twinx()
    draw_probe(ax, kl, [(s, r) for s, r in zip(steps, rows) if "probe_accept_online" in r])
    probe_legend(ax, kl)


def draw_probe(ax, kl_ax, probed: list[tuple[int, dict]], label: str = "") -> None:
    """Acceptance per step, online (served and newest) against frozen on `ax`, KL to pi_0 on `kl_ax` (its
    twin); `label` prefixes the legend (specrl compare draws several runs on one pair of axes)."""
    steps = [s for s, _ in probed]
    for key, style, name in (("probe_accept_online", "o-", "online (served)"),
                             ("probe_accept_newest", ".:", "online (newest)"),
                             ("probe_accept_frozen", "s--", "frozen step-0")):
        ax.plot(steps, [r.get(key, float("nan")) for _, r in probed], style, label=f"{label}{name}")
    ax.set_ylabel("expected accepted tokens (of k)")
    kl_ax.plot(steps, [r.get("probe_kl_pi0", float("nan")) for _, r in probed], "-", alpha=0.5,
               label=f"{label}KL(pi_t || pi_0)")
    kl_ax.set_ylabel("KL(pi_t || pi_0) per token")


def probe_legend(ax, kl_ax) -> None:
    (h1, l1), (h2, l2) = ax.get_legend_handles_labels(), kl_ax.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7)
