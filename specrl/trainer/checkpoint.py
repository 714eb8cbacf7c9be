"""Training checkpoints: `RUN_DIR/checkpoints/step_NNNNNN/` holding everything an exact resume needs.

    model/        the policy as a Hugging Face directory (safetensors, config, tokenizer): usable as is
    trainer.*     optimizer + LR schedule (+ KL reference) and the torch RNG (the learner's part)
    engine_drafter.*  the rollout drafter's cross-step state (suffix pools): the drafts decide the realised
                  tokens under rejection sampling, so an exact resume needs it
    drafter/, drafter_trainer.*  with rollout.drafter.online: the drafter in its own loadable layout and
                  its trainer's state
    state.json    step, Python RNG state, run bookkeeping; written last

Every file is safetensors or JSON (specrl.state_files), so nothing is unpickled; `save_checkpoint` writes
atomically, so a crash leaves the previous checkpoints intact.
"""
from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path
from typing import Callable, NamedTuple

from safetensors import SafetensorError

from ..errors import UserError
from ..heap import trim
from ..io import atomic_dir
from ..model.checkpoint import ModelFileError
from ..state_files import StateFileError, has_state, load_state, save_state

CKPT_DIR = "checkpoints"
DRAFTER_STATE = "engine_drafter"  # the rollout drafter's cross-step state; drafter/ is the trained drafter
TRAINER_STATE = "trainer"  # the policy trainer's state and the torch RNG (LocalLearner, FSDPLearner)
_NAME = re.compile(r"^step_(\d{6,})$")


class CheckpointError(UserError, RuntimeError):
    """A checkpoint could not be written or read; the message says which and what was kept."""

    exit_code = 1


class Checkpoint(NamedTuple):
    path: Path
    step: int  # RL steps completed
    state: dict  # state.json
    drafter: dict | None  # the drafter's state tree, when the run had one

    @property
    def model_dir(self) -> Path:
        return self.path / "model"


def checkpoint_paths(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run, oldest first (a directory without state.json is incomplete)."""
    root = Path(run_dir) / CKPT_DIR
    return sorted((int(m.group(1)), p) for p in (root.iterdir() if root.is_dir() else ())
                  if (m := _NAME.match(p.name)) and (p / "state.json").is_file())


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    return max(checkpoint_paths(run_dir), default=(None, None))[1]


def save_checkpoint(run_dir: str | Path, step: int, save_learner: Callable[[Path], None], drafter: dict | None,
                    state: dict, keep_last: int) -> Path:
    """Writes step `step` atomically (`save_learner(dir)` writes the policy and optimizer parts), then prunes to
    the newest `keep_last`; a write error (a full disk) is a CheckpointError, the previous checkpoints intact."""
    path = Path(run_dir) / CKPT_DIR / f"step_{step:06d}"
    full_state = {**state, "step": step, "python_rng": random.getstate()}  # JSON makes its tuples lists
    written = 0
    try:
        with atomic_dir(path) as tmp:
            try:
                save_learner(tmp)
                if drafter is not None:
                    save_state(tmp, DRAFTER_STATE, drafter)
                (tmp / "state.json").write_text(json.dumps(full_state))
            except WRITE_ERRORS:
                written = dir_bytes(tmp)  # before atomic_dir removes the partial directory
                raise
    except WRITE_ERRORS as e:
        raise write_failed(Path(run_dir), path, e, written, keep_last) from e
    for _, old in checkpoint_paths(run_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    trim()  # serialising copies every tensor once; give those pages back
    return path


# what writing a checkpoint raises on a full disk: safetensors wraps the OS error in its own type
WRITE_ERRORS = (OSError, SafetensorError)


def write_failed(run_dir: Path, path: Path, e: Exception, written: int, keep_last: int) -> CheckpointError:
    """One line: the out_dir, the reason, the space a checkpoint takes against what is free, and the knobs."""
    prev = latest_checkpoint(run_dir)
    # safetensors words it "Error while serializing: I/O error: No space left on device (os error 28)"
    reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e).rsplit("I/O error: ", 1)[-1]
    size = dir_bytes(prev) if prev else written
    need = f"{size / 2 ** 20:.1f} MiB (the last one's size)" if prev else \
        f"more than the {size / 2 ** 20:.1f} MiB written before the error"
    free = shutil.disk_usage(run_dir).free / 2 ** 20
    kept = f"The previous checkpoint {str(prev)!r} is intact" if prev else "No earlier checkpoint exists"
    return CheckpointError(
        f"could not write checkpoint {path.name} in out_dir={str(run_dir)!r}: {reason}. A checkpoint needs "
        f"{need}; with keep_last={keep_last} the run holds up to {keep_last + 1} at once (the kept ones and the "
        f"one being written), {(keep_last + 1) * size / 2 ** 20:.0f} MiB, and {free:.1f} MiB is free there. "
        f"{kept}. Free space or pick another out_dir, or save less often (schedule.save_every) or keep fewer "
        f"(schedule.keep_last), then continue with `specrl train resume={run_dir}`")


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def load_checkpoint(path: str | Path) -> Checkpoint:
    """The checkpoint's bookkeeping and drafter state; restores the Python RNG. The learner restores the
    policy, optimizer and torch RNG from the same directory (`Learner.load`)."""
    path = Path(path)
    if (path / "drafter.pkl").exists():
        raise CheckpointError(f"checkpoint {str(path)!r} holds a pickled drafter (drafter.pkl, written before "
                              "specrl 0.2): specrl never unpickles files; delete drafter.pkl to resume without "
                              "the suffix pools (same distribution, slower first steps)")
    try:
        state = json.loads((path / "state.json").read_text())
        drafter = load_state(path, DRAFTER_STATE) if has_state(path, DRAFTER_STATE) else None
    except (OSError, ValueError, StateFileError) as e:
        raise unreadable(path, e) from e
    version, internal, gauss = state["python_rng"]  # JSON made its tuples lists
    random.setstate((version, tuple(internal), gauss))
    return Checkpoint(path, int(state["step"]), state, drafter)


def unreadable(path: Path, cause: Exception) -> CheckpointError:
    return CheckpointError(f"checkpoint {str(path)!r} is unreadable ({getattr(cause, 'problem', cause)}); delete "
                           f"it (rm -r {path}) to resume from the one before")


READ_ERRORS = (OSError, ValueError, RuntimeError, KeyError, SafetensorError, StateFileError)
# what reading a checkpoint's files can raise while the run's parts are built from them; narrower than
# READ_ERRORS so that a bad setting (a KV budget, a device) is not blamed on the checkpoint
FILE_ERRORS = (OSError, SafetensorError, StateFileError, ModelFileError)
