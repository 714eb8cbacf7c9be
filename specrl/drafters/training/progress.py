"""A progress bar with an ETA for offline drafter training (rich, drawn only on a terminal)."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator


def eta_s(step: int, steps: int, elapsed_s: float, budget_s: float) -> float:
    """Seconds left of a fit that stops at `steps` or at `budget_s` seconds, whichever comes first: the
    remaining steps at the mean pace so far, capped by the rest of the time budget."""
    left = max(0.0, budget_s - elapsed_s)
    if step <= 0:
        return left
    return min(max(0, steps - step) * elapsed_s / step, left)


@contextmanager
def step_progress(steps: int, budget_s: float) -> Iterator[Callable[[int, float], None]]:
    """`with step_progress(steps, budget_s) as update: update(step, elapsed_s)`; a no-op off a terminal."""
    if not sys.stderr.isatty():
        yield lambda step, elapsed_s: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("eta {task.fields[eta]}"), console=Console(stderr=True)) as bar:
        task = bar.add_task("training", total=steps, eta="?")

        def update(step: int, elapsed_s: float) -> None:
            left = int(eta_s(step, steps, elapsed_s, budget_s))
            bar.update(task, completed=step, eta=f"{left // 60}:{left % 60:02d}")
        yield update
