"""The adaptive engine's warm-up profile (the target forward timed over a grid of batch sizes and draft lengths,
`AdaptiveStrategy.calibrate`), cached per machine, so that only the first engine of a model on a CPU pays it.

On SmolLM2-135M it is about 130 forwards of up to 64 x 5 tokens: tens of seconds at every engine start (a run's
rollout engine, its held-out engine, each resume, each bench arm), where a rollout of the steps task takes
about 40 s (docs/results/real_models.md). The timings depend on the CPU (model and bf16 flags), torch, the
thread count, the model's shape and dtype, the device and the grid (its draft lengths and cached context), so
all of them make the key, and a hit
replays the same grid. A profile timed while the machine was busy (load average above its CPUs + 1) serves
its own engine only and is not cached, as the dtype probe's figures are not (model/precision.py). The file
lives beside the dtype probe's (SPECRL_CACHE_DIR, else ~/.cache/specrl); a corrupt one is measured again.
The timings only steer which drafter drafts how many tokens: every draft is verified exactly either way.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import torch

from ... import io

log = logging.getLogger(__name__)

CACHE_FILE = "auto_warmup_v2.json"  # v2: each point carries its cached context (v1's file is left as it was)
WHAT = "warm-up profile of the adaptive engine"


def cache_key(model, max_batch: int, lengths: tuple[int, ...], context: int) -> str:
    """What the timings depend on: the machine, torch, threads, the model's shape, dtype and device, the grid."""
    from ...model.precision import cpu_name
    from .profile import fingerprint
    return json.dumps({"cpu": cpu_name(), "torch": torch.__version__, "threads": torch.get_num_threads(),
                       **fingerprint(model), "max_batch": max_batch, "lengths": list(lengths), "context": context},
                      sort_keys=True)


def cache_path() -> Path:
    return io.cache_dir() / CACHE_FILE


def read(key: str) -> dict[tuple[int, int, int], float] | None:
    """The cached grid for `key`: {(batch, tokens, context): seconds}, or None (not cached, or a corrupt file)."""
    entries = _entries(cache_path())
    hit = entries.get(key)
    if hit is None:
        return None
    return {(int(b), int(t), int(c)): float(s) for b, t, c, s in hit["points"]}


def write(key: str, points: dict[tuple[int, int, int], float]) -> bool:
    """Caches the grid unless the machine is busy; False when it was not cached."""
    from ...model.precision import busy, machine_load
    load = machine_load()
    if busy(load):
        log.info("auto: the warm-up profile was timed on a busy machine (load %.1f): not cached", load)
        return False
    path = cache_path()
    entries = _entries(path)
    entries[key] = {"points": [[b, t, c, s] for (b, t, c), s in sorted(points.items())], "load": round(load, 2),
                    "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    return io.write_cache(path, entries, WHAT)


def _entries(path: Path) -> dict:
    return io.read_cache(path, _well_formed, WHAT, "{key: {points: [[batch, tokens, context, seconds], ...]}}")


def _well_formed(entry) -> bool:
    points = entry.get("points") if isinstance(entry, dict) else None
    return isinstance(points, list) and bool(points) and all(
        isinstance(p, list) and len(p) == 4 and all(isinstance(x, (int, float)) for x in p) and p[3] > 0
        for p in points)
