"""One RL step: rollout (DES) + policy training + weight sync, sync or async, with and without SD."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from specrl.config.choices import PIPELINE_MODES, PLACEMENTS
from specrl.sim import cost
from specrl.sim.des import Engine, SDSetting
from specrl.sim.hardware import HardwareSpec
from specrl.sim.models import ModelSpec
from specrl.sim.rollout import simulate_rollout
from specrl.sim.workload import Workload


@dataclass(frozen=True)
class SimConfig:
    hw: HardwareSpec
    model: ModelSpec
    workload: Workload
    gpus: int
    tp: int = 1
    mode: str = "sync"
    max_lag: int = 1  # async: rollouts may use weights this many versions old
    colocated: bool = True  # rollout and training share all GPUs (sync only)
    rollout_frac: float = 0.5  # split placement: share of GPUs that generate
    sd: SDSetting | None = None
    mfu: float = 0.35  # training model-FLOPs utilisation
    max_num_seqs: int = 256
    drafter_train: bool = True  # train the drafter on idle rollout capacity (TLT)
    seed: int = 0
    share_prompt: bool = True  # a group's n samples prefill their prompt once (prefix caching)
    train_micro_batch: int | None = None  # pad length-sorted micro-batches (specrl's trainer); None: packed
    update_frac: float = 1.0  # share of rows the update runs (specrl skips GRPO rows of zero advantage)
    # async: the rollout engines stream lag+1 steps' prompts through continuous batching (NeMo-RL);
    # False generates each step's batch on its own, as specrl's in-process async pipeline does
    stream: bool = True

    def __post_init__(self):
        if self.mode not in PIPELINE_MODES:
            raise ValueError(f"unknown pipeline mode {self.mode!r}; expected one of {PIPELINE_MODES}")
        if self.mode == "async" and self.colocated:
            raise ValueError("async needs split rollout/training GPUs; set colocated=False "
                             "(--placement split)")
        if self.gpus % self.tp or self.gpus < self.tp * (1 if self.colocated else 2):
            raise ValueError(f"gpus={self.gpus} must be a multiple of tp={self.tp} with room for "
                             "a rollout replica and a trainer; change --gpus or --tp")

    @property
    def placement(self) -> str:
        """The word `ray.placement` of `specrl train` uses for the same layout: colocated or split."""
        return PLACEMENTS[0] if self.colocated else PLACEMENTS[1]

    @property
    def rollout_gpus(self) -> int:
        if self.colocated:
            return self.gpus
        r = int(round(self.gpus * self.rollout_frac / self.tp)) * self.tp
        return min(max(r, self.tp), self.gpus - self.tp)

    @property
    def train_gpus(self) -> int:
        return self.gpus if self.colocated else self.gpus - self.rollout_gpus


def simulate_step(cfg: SimConfig, lengths: np.ndarray | None = None) -> dict:
    """Step-time breakdown (seconds) and rollout statistics of one steady-state RL step. `lengths`
    [N * steps] replays recorded response lengths instead of sampling the workload's distribution."""
    rng = np.random.default_rng(cfg.seed)
    steps = 1 + cfg.max_lag if cfg.mode == "async" and cfg.stream else 1  # async streams lag+1 steps' prompts
    if lengths is None:
        lengths = np.concatenate([cfg.workload.sample_lengths(rng) for _ in range(steps)])  # [N*steps]
    ctx = cfg.workload.prompt_len + float(lengths.mean())  # KV blocks are allocated on demand
    slots = min(cfg.max_num_seqs, cost.kv_capacity_seqs(cfg.hw, cfg.model, cfg.tp, ctx))
    engine = Engine(cfg.hw, cfg.model, cfg.tp)
    ro = simulate_rollout(engine, lengths, cfg.workload.prompt_len, cfg.rollout_gpus // cfg.tp,
                          slots, cfg.sd, cfg.seed, steps, cfg.workload.n if cfg.share_prompt else 1)
    tokens = cfg.update_frac * train_tokens(lengths, cfg.workload.prompt_len, cfg.train_micro_batch) / steps
    train = cost.train_s(cfg.hw, cfg.model, tokens, cfg.train_gpus, cfg.mfu)
    sync = cost.weight_sync_s(cfg.hw, cfg.model, cfg.tp, cfg.colocated)
    drafter_exposed, drafter_total = _drafter_cost(cfg, tokens, ro.idle_frac * ro.time_s)
    if cfg.mode == "sync":
        step = ro.time_s + train + sync + drafter_exposed
    else:  # rollout and training overlap; generation pauses for each weight update
        step = max(ro.time_s + sync, train + drafter_exposed)
    return {"step_s": step, "rollout_s": ro.time_s, "train_s": train, "sync_s": sync,
            "drafter_train_s": drafter_total, "drafter_exposed_s": drafter_exposed,
            "gen_share": ro.time_s / step, "idle_frac": ro.idle_frac, "tail_frac": ro.tail_frac,
            "mean_batch": ro.mean_batch, "slots": slots, "spec_frac": ro.spec_frac,
            "replicas": cfg.rollout_gpus // cfg.tp, "rollout_gpus": cfg.rollout_gpus, "placement": cfg.placement,
            "train_gpus": cfg.train_gpus, "iterations": ro.iterations}


def train_tokens(lengths, prompt_len: float, micro_batch: int | None = None) -> float:
    """Tokens the policy update processes: prompt + response of every sequence; with `micro_batch`,
    each micro-batch of the length-sorted rows is padded to its longest row, as specrl's trainer does
    (packing trainers pad nothing)."""
    seq = np.sort(np.asarray(lengths, dtype=np.float64)) + prompt_len  # [N]
    if not micro_batch:
        return float(seq.sum())
    return float(sum(seq[i:i + micro_batch].max() * seq[i:i + micro_batch].size
                     for i in range(0, seq.size, micro_batch)))


def _drafter_cost(cfg: SimConfig, tokens: float, idle_replica_s: float) -> tuple[float, float]:
    """Drafter training time (wall, on training GPUs) and the part idle rollout GPUs cannot hide."""
    if cfg.sd is None or not cfg.drafter_train or cfg.sd.draft_frac == 0.0:
        return 0.0, 0.0
    params = cfg.sd.draft_frac * cfg.model.active_params
    total = cost.drafter_train_s(cfg.hw, params, tokens, cfg.train_gpus, cfg.mfu)
    if cfg.mode == "async":  # trainer GPUs run it after the policy update
        return total, total
    idle_gpu_s = idle_replica_s * cfg.rollout_gpus  # GPU-seconds idle in the tail
    exposed = max(0.0, total * cfg.train_gpus - idle_gpu_s) / cfg.train_gpus
    return exposed, total


def compare(cfg: SimConfig) -> dict:
    """SD config vs the same config without SD, and vs a sync colocated no-SD baseline."""
    with_sd = simulate_step(cfg)
    no_sd = simulate_step(replace(cfg, sd=None))
    base = no_sd if cfg.mode == "sync" and cfg.colocated else \
        simulate_step(replace(cfg, sd=None, mode="sync", colocated=True))
    out = {"sd": with_sd, "no_sd": no_sd, "baseline_sync_s": base["step_s"],
           "rollout_speedup": no_sd["rollout_s"] / with_sd["rollout_s"],
           "e2e_speedup": no_sd["step_s"] / with_sd["step_s"],
           "e2e_speedup_vs_sync_nosd": base["step_s"] / with_sd["step_s"]}
    if cfg.sd is not None:
        out["acceptance_length"] = cfg.sd.acceptance.mean_emitted
    return out
