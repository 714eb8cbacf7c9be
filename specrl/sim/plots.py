"""PNG plots of the sweeps (matplotlib imported lazily: it is an optional dependency)."""
from __future__ import annotations

from pathlib import Path

from specrl.errors import pyplot


def line_plot(rows: list[dict], x: str, ys: tuple[str, ...], path: Path, title: str,
              logx: bool = False) -> Path:
    plt = pyplot("`specrl simulate sweep --out`")
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for y in ys:
        ax.plot([r[x] for r in rows], [r[y] for r in rows], marker="o", label=y)
    ax.axhline(1.0, color="gray", lw=0.8, ls="--")
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(x)
    ax.set_ylabel("speedup (x)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_sweeps(acc: list[dict], batch: list[dict], gpus: list[dict], out_dir: Path,
                label: str) -> list[Path]:
    return [
        line_plot(acc, "acceptance_length", ("rollout_speedup", "e2e_speedup"),
                  out_dir / "speedup_vs_acceptance.png", f"SD speedup vs acceptance length ({label})"),
        line_plot(batch, "batch", ("speedup_static", "speedup_adaptive"),
                  out_dir / "speedup_vs_batch.png", f"one replica: SD speedup vs batch ({label})",
                  logx=True),
        line_plot(gpus, "gpus", ("rollout_speedup", "e2e_speedup"),
                  out_dir / "speedup_vs_gpus.png", f"SD speedup vs GPU count ({label})", logx=True),
    ]
