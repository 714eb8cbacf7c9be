"""Rich progress on the terminal: one bar over RL steps with the numbers people watch."""
from __future__ import annotations


class StepProgress:
    def __init__(self, total: int, start: int = 0, enabled: bool = True):
        self._bar = None
        if not enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        self._bar = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             TextColumn("{task.fields[info]}"))
        self._task = self._bar.add_task("train", total=total, completed=start, info="")
        self._bar.start()

    def update(self, row: dict) -> None:
        if self._bar is not None:
            info = (f"reward {row['reward_mean']:.3f}  acc_len {row['acceptance_length']:.2f}  "
                    f"step {row['step_s']:.1f}s  |dlogp| {row['logprob_diff']:.1e}")
            if "eval_accuracy" in row:
                info += f"  eval {row['eval_accuracy']:.3f}"
            self._bar.update(self._task, completed=row["step"], info=info)

    def log(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(text)
        else:
            print(text, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
