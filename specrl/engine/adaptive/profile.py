"""A saved profile of the adaptive engine: what an engine that has run before knows, as a prior for a fresh one.

A profile holds the cost model's fits, the acceptance counts per (drafter, kind) and per draft position, and
each arm's rate check, with what they were measured on (the model's shape and size, device, dtype, drafters).
A fresh engine that loads one starts from these figures instead of exploring every arm: its first plans take
the drafter and draft length that paid before. Loaded as a prior, every count is shrunk to a few rows' or
steps' weight (engine/constants.py PROFILE_*), so the engine's own observations outweigh it within a few steps,
and a wrong prior is corrected. A deterministic engine keeps the profile's cost fits whole (it never refits).

Which profile: `rollout.spec.cost_profile=PATH` (written by `specrl bench adaptive --save-profile PATH`); else,
for the embedded policy with its shipped drafters, the one shipped for this device and dtype
(tasks/assets/profiles/auto-DEVICE-DTYPE.json), read where the model matches it. A profile measured on another
model, device or dtype is ignored with a warning that names what differs and how to write one here. A prior
only changes which drafter drafts how many tokens; every draft is verified exactly, so the sampled
distribution is the same.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from ..constants import PROFILE_CHECK_STEPS, PROFILE_FIT_STEPS, PROFILE_ROWS
from ..cost_model import PROFILE_VERSION, STRATEGY_PROFILE_VERSION, CostProfileError

log = logging.getLogger(__name__)

SHIPPED_DIR = Path(__file__).resolve().parents[2] / "tasks" / "assets" / "profiles"
MATCHED = ("model", "device", "dtype")  # what a profile must share with the engine to be its prior


def fingerprint(target) -> dict:
    """What a profile is valid for: the target's shape and size, device and dtype."""
    c, p = target.config, next(target.parameters())
    return {"model": f"{c.arch} {c.num_layers}x{c.hidden_size} vocab {c.vocab_size} {c.num_params} params",
            "device": p.device.type, "dtype": str(p.dtype).removeprefix("torch.")}


def shipped_path(spec, target) -> Path | None:
    """The shipped profile for this engine, if one was measured on its model (the embedded policy, or weights
    trained from it), device and dtype, with the shipped drafters (no checkpoint of one's own)."""
    fp = fingerprint(target)
    path = SHIPPED_DIR / f"auto-{fp['device']}-{fp['dtype']}.json"
    if spec.draft_model is not None or not path.is_file():
        return None
    return path if mismatch(read(path).get("meta", {}), target) is None else None


def save(strategy, out: str | Path, target, **meta) -> None:
    """Writes the strategy's learned state (cost fits, acceptance counts, rate checks) as a profile."""
    state = strategy.state_dict()
    Path(out).write_text(json.dumps({"version": STRATEGY_PROFILE_VERSION, "meta": {**fingerprint(target), **meta,
                                      "drafters": list(strategy.names)}, **state}, indent=1))


def read(path: str | Path) -> dict:
    """The profile at `path` (either version), as a dict; a clear error for a missing or malformed file."""
    p = Path(path)
    if not p.is_file():
        raise CostProfileError(f"cost_profile {str(p)!r} does not exist: write one with `specrl bench adaptive "
                               "--save-profile PATH`, or drop cost_profile")
    try:
        s = json.loads(p.read_text())
        if s.get("version") not in (PROFILE_VERSION, STRATEGY_PROFILE_VERSION):
            raise KeyError(f"version {s.get('version')!r}, expected {PROFILE_VERSION} or {STRATEGY_PROFILE_VERSION}")
        return s
    except (json.JSONDecodeError, KeyError, AttributeError) as e:
        raise CostProfileError(f"cost_profile {str(p)!r} is not a cost-model profile ({type(e).__name__}: {e}): "
                               "write a fresh one with `specrl bench adaptive --save-profile PATH`") from None


def mismatch(meta: dict, target) -> str | None:
    """What differs between a profile's measurements and this engine (None: nothing it records)."""
    here = fingerprint(target)
    diff = [f"{key} {meta[key]!r} (here {here[key]!r})" for key in MATCHED if key in meta and meta[key] != here[key]]
    return ", ".join(diff) or None


def load(strategy, path: str | Path, target) -> bool:
    """Loads the profile at `path` into a fresh strategy as its prior; False (with a warning) when it was
    measured on another model, device or dtype."""
    s = read(path)
    # a cost-model profile (version 1) records no fingerprint of its model
    why = mismatch(s.get("meta", {}), target) if s["version"] == STRATEGY_PROFILE_VERSION else None
    if why is not None:
        log.warning("cost_profile %r ignored: it was measured on %s. Write one for this engine with `specrl bench "
                    "adaptive --model ... --device ... --dtype ... --save-profile PATH`", str(path), why)
        return False
    # a profile may carry no cost fits (the shipped one: its clock was another job's), only counts
    cost = s.get("cost") if s["version"] == STRATEGY_PROFILE_VERSION else s
    try:
        if cost is not None:
            strategy.cost.load_state_dict(cost)
            strategy.cost.target.theta  # noqa: B018 (a singular or ragged fit fails here, not mid-run)
        if s["version"] == STRATEGY_PROFILE_VERSION:
            load_counts(strategy, s)
    except (KeyError, TypeError, ValueError, IndexError, RuntimeError, AttributeError) as e:
        raise CostProfileError(f"cost_profile {str(path)!r} is not a cost-model profile ({type(e).__name__}: "
                               f"{e}): write a fresh one with `specrl bench adaptive --save-profile PATH`") from None
    if cost is not None and not strategy.deterministic:
        strategy.cost.shrink(PROFILE_FIT_STEPS)
    return True


def load_counts(strategy, s: dict) -> None:
    """The acceptance counts and rate checks, each shrunk to a prior's weight."""
    for key, sub in s["stats"]:
        stats = strategy.stats.get(tuple(key))
        if stats is not None:
            stats.load_state_dict(sub)
            stats.shrink(PROFILE_ROWS)
    strategy.checks.load_state_dict(s.get("checks", []))
    strategy.checks.shrink(PROFILE_CHECK_STEPS)

