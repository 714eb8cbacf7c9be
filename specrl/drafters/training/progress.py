"""A progress bar with an ETA for offline drafter training (rich, drawn only on a terminal; rich is optional)."""
from __future__ import annotations

import sys


def eta_s(step: int, steps: int, elapsed_s: float, budget_s: float) -> float:
    """Seconds left of a fit that stops at `steps` or at `budget_s` seconds, whichever comes first: the
    remaining steps at the mean pace so far, capped by the rest of the time budget."""
    left = max(0.0, budget_s - elapsed_s)
    if step <= 0:
        return left
    return min(max(0, steps - step) * elapsed_s / step, left)


class StepProgress:
    """`with StepProgress(steps, budget_s) as p: p.update(step, elapsed_s)`; a no-op off a terminal."""

    def __init__(self, steps: int, budget_s: float, description: str = "training"):
        self.steps, self.budget_s, self.description = steps, budget_s, description
        self.bar = self.task = None

    def __enter__(self) -> "StepProgress":
        if not sys.stderr.isatty():
            return self
        try:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        except ImportError:
            return self
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("eta {task.fields[eta]}"), console=Console(stderr=True))
        self.bar.__enter__()
        self.task = self.bar.add_task(self.description, total=self.steps, eta="?")
        return self

    def update(self, step: int, elapsed_s: float) -> None:
        if self.bar is not None:
            left = int(eta_s(step, self.steps, elapsed_s, self.budget_s))
            self.bar.update(self.task, completed=step, eta=f"{left // 60}:{left % 60:02d}")

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)
