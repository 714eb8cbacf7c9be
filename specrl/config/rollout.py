"""The rollout's section of the run's config tree (`rollout`): sampling, the engine's memory and precision, its
speculative decoding (`rollout.spec`, the engine's `SpecConfig`), the sampler audit and the online drafter
(`rollout.drafter`, with its health alarm)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.memory import DEFAULT_MEMORY_UTILIZATION, parse_bytes
from ..engine.methods import SpecConfig
from ..model.checkpoint import DTYPES
from ..optim import OptimSettings
from .build import require, require_min


def is_positive_size(value) -> bool:
    """A byte size (`parse_bytes`: 2147483648, "2GiB", ...) greater than zero."""
    try:
        return parse_bytes(value) > 0
    except ValueError:
        return False


DRAFTER_SCHEDULES = ("after_step", "long_tail", "beside_trainer")


@dataclass
class HealthConfig:
    """`rollout.drafter.health`: the drafter health alarm (specrl.drafters.training.health)."""
    window: int = 5  # earlier steps averaged as the reference
    min_history: int = 3  # earlier steps needed before a drop can be judged
    drop_ratio: float = 0.5  # alarm when acceptance < drop_ratio * recent mean
    max_version_lag: int = 1  # alarm when trainer version - engine version exceeds this

    def __post_init__(self):
        self.validate()  # the run loop and the tests build one in Python

    def validate(self) -> None:
        require(self.window >= 1, "window", self.window, ">= 1")
        require(1 <= self.min_history <= self.window, "min_history", self.min_history, f"in [1, window={self.window}]")
        require(0 < self.drop_ratio < 1, "drop_ratio", self.drop_ratio, "in (0, 1)")
        require(self.max_version_lag >= 0, "max_version_lag", self.max_version_lag, ">= 0")


@dataclass
class DrafterConfig:
    """`rollout.drafter`: online training of the rollout engine's model drafter while the policy trains
    (specrl.drafters.training.online; defined in the config tree, which the drafters and the trainer both read).
    Usage and schedules: docs/training.md."""
    online: bool = False
    schedule: str = "after_step"
    tail_max_running: int = 8  # long_tail: train once this few sequences are still running
    # AdamW of the drafter, at a constant learning rate: the drafter never stops
    optim: OptimSettings = field(default_factory=lambda: OptimSettings(lr=3e-4, betas=(0.9, 0.95)))
    kl_coef: float = 1.0  # forward KL(p || q) to the policy's distribution
    accept_coef: float = 0.0  # 1 - expected accepted mass sum_x min(p, q)
    reward_weighting: bool = False  # ReSpec: trajectories weighted by w(r) per GRPO group, clipped, mean 1
    reward_w_max: float = 2.0
    reward_w_floor: float = 0.25  # the least weight before normalising: failed rows still teach the drafter
    updates_per_step: int = 1  # AdamW steps per RL step, each on its own share of the kept trajectories
    window: int = 1  # replay window: each update trains on the captures of the last this many RL steps
    # the drift probe's share of a step's rows, taken from those sample_fraction leaves (none left at
    # sample_fraction=1: no probe), never trained on; 0: no probe (docs/training.md)
    probe_fraction: float = 0.125
    ttt_steps: int = 3  # EAGLE-3 training-time-test unroll
    unroll_decay: float = 0.8  # weight decay^j of unroll step j (EAGLE-3 TTT steps, MTP depths)
    mtp_depths: int = 2  # MTP depths trained (depths past the stack reuse its last module)
    # share of a step's trajectories kept for the drafter, at least one, however the micro-batches cut them (the
    # n samples of a prompt are near duplicates)
    sample_fraction: float = 0.125
    health: HealthConfig = field(default_factory=HealthConfig)

    MOVED = {**{key: f".optim.{key}" for key in ("lr", "weight_decay", "grad_clip")},
             "alarm_window": ".health.window", "alarm_max_lag": ".health.max_version_lag"}

    def validate(self) -> None:
        require(self.schedule in DRAFTER_SCHEDULES, "schedule", self.schedule, f"one of {list(DRAFTER_SCHEDULES)}")
        require(self.optim.warmup_steps == 0 and self.optim.min_lr_ratio == 1, "optim.warmup_steps",
                self.optim.warmup_steps, "0, with optim.min_lr_ratio 1 (the online drafter's learning rate is "
                "constant)", "leave rollout.drafter.optim.warmup_steps and min_lr_ratio at their defaults")
        require_min(self, 1, "tail_max_running", "reward_w_max", "updates_per_step", "ttt_steps", "mtp_depths")
        require(0 < self.unroll_decay <= 1, "unroll_decay", self.unroll_decay, "in (0, 1]")
        require(self.kl_coef >= 0 and self.accept_coef >= 0 and self.kl_coef + self.accept_coef > 0, "kl_coef",
                self.kl_coef, ">= 0, with accept_coef >= 0 and not both 0")
        require(0 < self.sample_fraction <= 1, "sample_fraction", self.sample_fraction, "in (0, 1]")
        require(0 <= self.reward_w_floor <= 1 <= self.reward_w_max, "reward_w_floor", self.reward_w_floor,
                f"in [0, 1] (with reward_w_max={self.reward_w_max} >= 1)")
        require_min(self, 1, "window")
        require(0 <= self.probe_fraction < 1, "probe_fraction", self.probe_fraction, "in [0, 1)",
                "0 turns the drift probe off")


AUDIT_MODES = ("on", "fallback", "off")


@dataclass
class RolloutConfig:
    prompts_per_step: int = 8
    n: int = 8  # samples per prompt (the GRPO group)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int | None = None  # a response's budget; null: the data source's (DataConfig.budget)
    max_num_seqs: int = 64  # engine batch (concurrent sequences)
    # "auto": the adaptive engine (specrl/engine/adaptive/) picks each step's drafter and draft lengths
    spec: SpecConfig = field(default_factory=lambda: SpecConfig(method="auto", num_speculative_tokens=4))
    # write rollout_trace.jsonl and rollout_workload.jsonl: the input of `specrl simulate calibrate --train-runs`
    trace: bool = False
    drafter: DrafterConfig = field(default_factory=DrafterConfig)
    # the engine's copy of the policy; null: the top-level `dtype`; "auto": measured (specrl/model/precision.py).
    # "bfloat16" halves its memory (sampling stays fp32)
    dtype: str | None = None
    # KV cache budget: kv_cache_memory bytes (e.g. 2GiB), else memory_utilization x the free memory; the
    # context per sequence is max_model_len, or what the budget gives (capped by the model) when unset
    max_model_len: int | None = None
    kv_cache_memory: int | str | None = None
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION
    audit: str = "on"  # the sampler audit (specrl/audit/): were the rollouts drawn from the policy?
    # groups audited per step, drawn before the rewards (null: every group, scored from the update's own forward;
    # an int draws that many from the seed and step)
    audit_groups: int | None = None
    audit_alpha: float = 1e-3  # the chance the audit's e-process ever rings over a run of an exact sampler
    # async with a policy lag: rows of the version before need a forward of their own, cut to this share of the
    # previous update's work (the rows seen: metric sampler_rows)
    audit_share: float = 0.03

    MOVED = {"backend": "pipeline.backend"}  # keys that moved: from_dict's error names the new one

    def validate(self) -> None:
        require(self.dtype is None or self.dtype in DTYPES or self.dtype == "auto", "dtype", self.dtype,
                f"auto, one of {sorted(DTYPES)} or null (the top-level dtype)")
        require(self.max_model_len is None or self.max_model_len >= 2, "max_model_len", self.max_model_len,
                ">= 2 or null", "null sizes it from the memory budget")
        require(0 < self.memory_utilization <= 1, "memory_utilization", self.memory_utilization, "in (0, 1]")
        require(self.kv_cache_memory is None or is_positive_size(self.kv_cache_memory), "kv_cache_memory",
                self.kv_cache_memory, "a positive size such as 2GiB or 2147483648", "or null to use memory_utilization")
        require_min(self, 1, "prompts_per_step", "max_num_seqs")
        require(self.n >= 2, "n", self.n, ">= 2 samples per prompt", "GRPO needs a group to compare against")
        require(self.temperature > 0, "temperature", self.temperature, "> 0",
                "RL samples need temperature > 0; greedy is used for evaluation only")
        require(self.max_tokens is None or self.max_tokens >= 1, "max_tokens", self.max_tokens, ">= 1 or null")
        require(self.audit in AUDIT_MODES, "audit", self.audit, f"one of {list(AUDIT_MODES)}",
                "on stops the run on a failed sampler audit, fallback turns SD off, off skips the audit")
        require(self.audit_groups is None or self.audit_groups >= 1, "audit_groups", self.audit_groups,
                ">= 1 or null (every group)")
        require(0 < self.audit_share <= 1, "audit_share", self.audit_share, "a share in (0, 1]",
                "set rollout.audit_share=0.03 (the default: the audit's own forward, async, may cost 3% of the "
                "update), or rollout.audit=off to skip the audit")
        require(0 < self.audit_alpha < 1, "audit_alpha", self.audit_alpha, "in (0, 1)",
                "the false-alarm probability over the whole run, e.g. 1e-3")
