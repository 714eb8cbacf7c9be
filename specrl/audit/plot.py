"""The sampler audit's picture: the e-process's running value (log scale) against the alarm's 1/alpha."""
from __future__ import annotations

import math


def draw_eprocess(ax, steps: list[float], log_e: list[float], alpha: float, label: str = "e-process") -> None:
    """Plots log10 of the e-value at each step, its running maximum, and log10(1/alpha) on `ax`."""
    shown = [min(v, 1e3) / math.log(10) for v in log_e]  # an impossible token's inf is drawn at the top
    peak, best = [], 0.0  # the e-process starts at 1
    for v in shown:
        best = max(best, v)
        peak.append(best)
    ax.plot(steps, shown, "-", lw=1, label=f"{label}: log10 e-value")
    ax.plot(steps, peak, "--", lw=1, label=f"{label}: running maximum")
    ax.axhline(math.log10(1 / alpha), color="r", ls="--", lw=1, label=f"alarm: 1/alpha = {1 / alpha:g}")
    ax.set_ylabel("log10 e-value (alarm at the red line)")
    ax.legend(fontsize=8)
