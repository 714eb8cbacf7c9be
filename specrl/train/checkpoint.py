"""Training checkpoints: `RUN_DIR/checkpoints/step_NNNNNN/` holding everything an exact resume needs.

    model/        the policy as a Hugging Face directory (fp32 safetensors, config, tokenizer): usable as is
    trainer.pt    optimizer + LR schedule (+ KL reference), torch RNG (tensors only, loaded weights_only)
    drafter.pkl   a model-free drafter's cross-step state (suffix pools of earlier rollouts), when there is one:
                  rejection sampling makes the realised tokens depend on the drafts, so an exact resume needs it
    state.json    step, Python RNG state, run bookkeeping; written last

A checkpoint directory is written to a temporary name and renamed into place, so a crash or a full disk
leaves the previous checkpoints untouched; only then are checkpoints older than the last K removed.
"""
from __future__ import annotations

import json
import pickle
import random
import re
import shutil
from pathlib import Path
from typing import NamedTuple

import torch
from safetensors import SafetensorError

from ..errors import UserError
from ..io import atomic_dir
from ..model import CausalLM, load_model, save_model

CKPT_DIR = "checkpoints"
_NAME = re.compile(r"^step_(\d{6,})$")


class CheckpointError(UserError, RuntimeError):
    """A checkpoint could not be written or read; the message says which and what was kept."""

    exit_code = 1


class Checkpoint(NamedTuple):
    path: Path
    step: int  # RL steps completed
    state: dict  # state.json
    trainer: dict  # trainer.pt
    drafter: object | None  # drafter.pkl


def checkpoint_paths(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run, oldest first (a directory without state.json is incomplete)."""
    root = Path(run_dir) / CKPT_DIR
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if (m := _NAME.match(p.name)) and (p / "state.json").is_file()]
    return sorted(found)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    paths = checkpoint_paths(run_dir)
    return paths[-1][1] if paths else None


def save_checkpoint(run_dir: str | Path, step: int, policy: CausalLM, trainer_state: dict, state: dict,
                    keep_last: int, tokenizer_dir: str | Path | None = None, drafter: object | None = None) -> Path:
    """Writes step `step` atomically, then prunes to the newest `keep_last`. Raises CheckpointError on an
    OS error (a full disk), with the previous checkpoints intact."""
    path = Path(run_dir) / CKPT_DIR / f"step_{step:06d}"
    rng = {"torch_rng": torch.get_rng_state()}
    full_state = {**state, "step": step, "python_rng": _jsonable(random.getstate())}
    try:
        with atomic_dir(path) as tmp:
            save_model(policy, tmp / "model", tokenizer_dir=tokenizer_dir)
            torch.save({**trainer_state, **rng}, tmp / "trainer.pt")
            if drafter is not None:
                (tmp / "drafter.pkl").write_bytes(pickle.dumps(drafter))
            (tmp / "state.json").write_text(json.dumps(full_state))
    except OSError as e:
        prev = latest_checkpoint(run_dir)
        kept = f"the previous checkpoint {str(prev)!r} is intact" if prev else "no earlier checkpoint exists"
        raise CheckpointError(f"could not write checkpoint {str(path)!r}: {e.strerror or e}; {kept}. Free disk "
                              f"space and continue with `specrl train resume={run_dir}`") from e
    for _, old in checkpoint_paths(run_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def load_checkpoint(path: str | Path, device: str = "cpu", dtype=torch.float32) -> tuple[Checkpoint, CausalLM]:
    """The checkpoint's bookkeeping and its policy. Restores the Python and torch RNGs."""
    path = Path(path)
    try:
        state = json.loads((path / "state.json").read_text())
        trainer = torch.load(path / "trainer.pt", map_location=device, weights_only=True)
        policy = load_model(path / "model", device=device, dtype=dtype)
        # our own file, written by save_checkpoint above (HF weights are never unpickled)
        drafter = pickle.loads((path / "drafter.pkl").read_bytes()) if (path / "drafter.pkl").is_file() else None
    except (OSError, ValueError, RuntimeError, pickle.UnpicklingError, SafetensorError) as e:
        raise CheckpointError(f"checkpoint {str(path)!r} is unreadable ({getattr(e, 'problem', e)}); delete it "
                              f"(rm -r {path}) to resume from the one before") from e
    random.setstate(_tuplify(state["python_rng"]))
    torch.set_rng_state(trainer.pop("torch_rng"))
    return Checkpoint(path, int(state["step"]), state, trainer, drafter), policy


def _jsonable(x):
    return [_jsonable(v) for v in x] if isinstance(x, tuple) else x


def _tuplify(x):
    return tuple(_tuplify(v) for v in x) if isinstance(x, list) else x
