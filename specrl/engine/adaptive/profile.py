"""A saved profile of the adaptive engine (cost fits, acceptance counts per (drafter, kind) and draft position,
rate checks, and what they were measured on) as the prior of a fresh engine: its first plans take the drafter
and draft length that paid before instead of exploring every arm. Every count is shrunk to a few rows' or
steps' weight (constants.py PROFILE_*), so the engine's own observations soon outweigh a wrong prior; a
deterministic engine keeps the cost fits whole (it never refits).

Which profile: `rollout.spec.auto.cost_profile=PATH` (`specrl bench adaptive --save-profile PATH`); else, for the
embedded policy with its shipped drafters, tasks/assets/profiles/auto-DEVICE-DTYPE.json. One measured on
another model, device or dtype is ignored with a warning that names what differs. A prior only changes which
drafter drafts how many tokens: every draft is verified exactly.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from .constants import PROFILE_CHECK_STEPS, PROFILE_FIT_STEPS, PROFILE_ROWS
from .cost_model import LOAD_ERRORS, STRATEGY_PROFILE_VERSION, bad_profile, read_profile

log = logging.getLogger(__name__)

SHIPPED_DIR = Path(__file__).resolve().parents[2] / "tasks" / "assets" / "profiles"
_MATCHED = ("model", "device", "dtype")  # what a profile must share with the engine to be its prior


def fingerprint(target) -> dict:
    """What a profile is valid for: the target's shape and size, device and dtype."""
    c, p = target.config, next(target.parameters())
    return {"model": f"{c.arch} {c.num_layers}x{c.hidden_size} vocab {c.vocab_size} {c.num_params} params",
            "device": p.device.type, "dtype": str(p.dtype).removeprefix("torch.")}


def shipped_path(spec, target) -> Path | None:
    """The shipped profile, where it was measured on this model, device and dtype with the shipped drafters."""
    fp = fingerprint(target)
    path = SHIPPED_DIR / f"auto-{fp['device']}-{fp['dtype']}.json"
    if spec.draft_model is not None or not path.is_file():
        return None
    return path if mismatch(read_profile(path).get("meta", {}), target) is None else None


def save(strategy, out: str | Path, target, **meta) -> None:
    """Writes the strategy's learned state (cost fits, acceptance counts, rate checks) as a profile."""
    state = strategy.state_dict()
    Path(out).write_text(json.dumps({"version": STRATEGY_PROFILE_VERSION, "meta": {**fingerprint(target), **meta,
                                      "drafters": list(strategy.names)}, **state}, indent=1))


def mismatch(meta: dict, target) -> str | None:
    """What differs between a profile's measurements and this engine (None: nothing it records)."""
    here = fingerprint(target)
    diff = [f"{key} {meta[key]!r} (here {here[key]!r})" for key in _MATCHED if key in meta and meta[key] != here[key]]
    return ", ".join(diff) or None


def load(strategy, path: str | Path, target) -> bool:
    """Loads the profile at `path` as a fresh strategy's prior; False (with a warning) when measured elsewhere."""
    s = read_profile(path)
    v2 = s["version"] == STRATEGY_PROFILE_VERSION
    why = mismatch(s.get("meta", {}), target) if v2 else None  # a cost-model profile records no fingerprint
    if why is not None:
        log.warning("cost_profile %r ignored: it was measured on %s. Write one for this engine with `specrl bench "
                    "adaptive --model ... --device ... --dtype ... --save-profile PATH`", str(path), why)
        return False
    try:  # a profile may carry no cost fits (the shipped one: its clock was another job's), only counts
        has_fits = strategy.cost.load_fits(s)
        if v2:  # the acceptance counts and rate checks, each shrunk to a prior's weight
            for key, sub in s["stats"]:
                stats = strategy.stats.get(tuple(key))
                if stats is not None:
                    stats.load_state_dict(sub)
                    stats.shrink(PROFILE_ROWS)
            strategy.checks.load_state_dict(s.get("checks", []))
            strategy.checks.shrink(PROFILE_CHECK_STEPS)
    except LOAD_ERRORS as e:
        raise bad_profile(path, e) from None
    if has_fits and not strategy.deterministic:
        strategy.cost.shrink(PROFILE_FIT_STEPS)
    return True

