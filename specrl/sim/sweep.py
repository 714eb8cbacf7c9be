"""Sweeps behind the plots: SD speedup against acceptance length, batch size and GPU count."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from specrl.sim import cost
from specrl.sim.acceptance import from_acceptance_length
from specrl.sim.auto import over_one
from specrl.sim.des import Engine, simulate_replica
from specrl.sim.pipeline import SimConfig, compare

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
GPU_COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048)


def _point(cfg: SimConfig, **extra) -> dict:
    r = compare(cfg)
    return {**extra, "rollout_speedup": r["rollout_speedup"], "e2e_speedup": r["e2e_speedup"],
            "step_s_sd": r["sd"]["step_s"], "step_s_no_sd": r["no_sd"]["step_s"]}


def vs_acceptance(cfg: SimConfig, points: int = 8) -> list[dict]:
    """Acceptance length from 1.2 to nearly k+1 at the config's k."""
    k = cfg.sd.acceptance.k
    out = []
    for tau in np.linspace(1.2, k + 0.9, points):
        sd = replace(cfg.sd, acceptance=from_acceptance_length(float(tau), k))
        out.append(_point(replace(cfg, sd=sd), sweep="acceptance", acceptance_length=float(tau)))
    return out


def vs_batch(cfg: SimConfig, sizes=BATCH_SIZES) -> list[dict]:
    """One replica generating a batch of B sequences (queued beyond its KV capacity), SD static vs
    adaptive ("auto": the config's, else auto over the config's one drafter), against no SD."""
    engine = Engine(cfg.hw, cfg.model, cfg.tp)
    ctx = cfg.workload.prompt_len + float(np.mean(cfg.workload.sample_lengths(
        np.random.default_rng(cfg.seed))))
    capacity = cost.kv_capacity_seqs(cfg.hw, cfg.model, cfg.tp, ctx)
    adaptive = cfg.sd if cfg.sd.auto is not None else \
        replace(cfg.sd, auto=over_one(cfg.hw, cfg.sd.acceptance, cfg.sd.draft_frac))
    static = replace(cfg.sd, auto=None)
    out = []
    for b in sizes:
        lengths = cfg.workload.lengths.sample(b, np.random.default_rng([cfg.seed, b]))
        lengths = np.clip(lengths, 1, cfg.workload.max_tokens).astype(np.int64)  # [B]
        times = [simulate_replica(engine, lengths, cfg.workload.prompt_len, min(b, capacity), sd,
                                  np.random.default_rng(cfg.seed)).time_s
                 for sd in (None, static, adaptive)]
        out.append({"sweep": "batch", "batch": b, "speedup_static": times[0] / times[1],
                    "speedup_adaptive": times[0] / times[2]})
    return out


def vs_gpus(cfg: SimConfig, counts=GPU_COUNTS) -> list[dict]:
    valid = [g for g in counts if g % cfg.tp == 0 and g >= 2 * cfg.tp]
    return [_point(replace(cfg, gpus=g), sweep="gpus", gpus=g) for g in valid]
