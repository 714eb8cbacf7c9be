"""`TrainConfig`: the typed config tree of `specrl train` (YAML file plus `key.sub=value` overrides). The defaults
are the recipe it runs with no arguments: GRPO on the shipped arithmetic policy with adaptive ("auto")
speculative decoding, sized for a 2-core CPU."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ..config import ConfigError, require, require_min
from ..config.choices import PIPELINE_MODES, PLACEMENTS
from ..engine.memory import DEFAULT_MEMORY_UTILIZATION, parse_bytes
from ..engine.methods import SpecConfig, model_method
from ..model.checkpoint import DTYPES
from ..optim import OptimSettings


def is_positive_size(value) -> bool:
    """A byte size (`parse_bytes`: 2147483648, "2GiB", ...) greater than zero."""
    try:
        return parse_bytes(value) > 0
    except ValueError:
        return False


class Budget(NamedTuple):
    """What a data source's rollouts and held-out evaluation may spend, for the keys left null."""
    max_tokens: int  # rollout.max_tokens
    eval_size: int  # data.eval_size
    eval_max_tokens: int  # data.eval_max_tokens


# the embedded tasks' budgets: room for "chain"'s longest worked solution (125 hops, counted)
TASK_BUDGETS = {"chain": Budget(1100, 100, 1100), "arith": Budget(200, 200, 200)}
# a prompt/answer file: a real chat model's worked answer on one core, with an evaluation short enough to
# wait for (chain's budgets are not: docs/training.md, "Budgets")
FILE_BUDGET = Budget(256, 64, 256)


@dataclass
class DataConfig:
    source: str = "chain"  # an embedded task (specrl.tasks.TASKS: "chain", "arith") or a .jsonl / .parquet file
    eval_source: str | None = None  # held-out file; None: the task's test split, or the last eval_size rows
    eval_size: int | None = None  # held-out problems, one completion each; null: the source's (Budget)
    eval_max_tokens: int | None = None  # null: the source's (Budget)
    # null: the rollout's (accuracy of the policy RL trains); 0: greedy (a small policy may loop on long chains)
    eval_temperature: float | None = None
    prompt_key: str = "prompt"
    answer_key: str = "answer"
    chat_template: bool = True  # wrap prompts in the tokenizer's chat template when it has one
    # an embedded task's hop counts (a clipped lognormal); null keeps the task's own
    hops_median: float | None = None
    hops_sigma: float | None = None
    max_hops: int | None = None

    @property
    def is_task(self) -> bool:
        """The source names an embedded task rather than a file."""
        return Path(self.source).suffix == "" and "/" not in self.source

    @property
    def budget(self) -> Budget:
        """The source's budget (`TASK_BUDGETS`, or `FILE_BUDGET` for a file): what null keys become."""
        return TASK_BUDGETS.get(self.source, FILE_BUDGET)

    def validate(self) -> None:
        require(self.eval_size is None or self.eval_size >= 0, "eval_size", self.eval_size, ">= 0 or null",
                "use 0 to turn evaluation off")
        require(self.eval_max_tokens is None or self.eval_max_tokens >= 1, "eval_max_tokens", self.eval_max_tokens,
                ">= 1 or null")
        require(self.eval_temperature is None or self.eval_temperature >= 0, "eval_temperature",
                self.eval_temperature, ">= 0 or null", "null samples at the rollout temperature, 0 is greedy")
        if not self.is_task:
            for key in ("hops_median", "hops_sigma", "max_hops"):
                require(getattr(self, key) is None, key, getattr(self, key), "null with a file source",
                        "hop counts shape the embedded tasks only")
            return
        from ..tasks.arith import COUNTER_DIGITS, TASKS
        require(self.source in TASKS, "source", self.source, f"an embedded task, one of {list(TASKS)}, or a .jsonl / "
                ".parquet file", "e.g. data.source=chain (the default) or data.source=arith (the short one)")
        require(self.hops_median is None or self.hops_median > 0, "hops_median", self.hops_median, "> 0 or null")
        require(self.hops_sigma is None or self.hops_sigma >= 0, "hops_sigma", self.hops_sigma, ">= 0 or null",
                "0 gives every problem the median's hop count")
        most = 10 ** COUNTER_DIGITS - 1
        require(self.max_hops is None or 1 <= self.max_hops <= most, "max_hops", self.max_hops,
                f"in [1, {most}] or null", f"a counted worked solution numbers its lines with {COUNTER_DIGITS} digits")


@dataclass
class RewardConfig:
    name: str = "chain"  # see specrl.train.rewards.REWARDS

    def validate(self) -> None:
        from .rewards import REWARDS
        require(self.name in REWARDS, "name", self.name, f"one of {REWARDS.names}",
                "register a new one with specrl.train.rewards.register_reward")


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
    (specrl.drafters.training.online; defined here because specrl.train imports nothing from specrl.drafters).
    Usage and schedules: docs/training.md."""
    online: bool = False
    schedule: str = "after_step"
    tail_max_running: int = 8  # long_tail: train once this few sequences are still running
    # AdamW of the drafter, at a constant learning rate: the drafter never stops
    optim: OptimSettings = field(default_factory=lambda: OptimSettings(lr=3e-4, betas=(0.9, 0.95)))
    kl_coef: float = 1.0  # forward KL(p || q) to the policy's distribution
    accept_coef: float = 0.0  # 1 - expected accepted mass sum_x min(p, q)
    reward_weighting: bool = False  # ReSpec: trajectories weighted by w(r), normalised and clipped
    reward_w_max: float = 2.0
    updates_per_step: int = 1  # AdamW steps per RL step, each on its own share of the kept trajectories
    ttt_steps: int = 3  # EAGLE-3 training-time-test unroll
    unroll_decay: float = 0.8  # weight decay^j of unroll step j (EAGLE-3 TTT steps, MTP depths)
    mtp_depths: int = 2  # MTP depths trained (depths past the stack reuse its last module)
    # share of each micro-batch's trajectories kept for the drafter (the n samples of a prompt are near duplicates)
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
    # groups audited per step, drawn before the rewards (null: all); a few keep the audit a small share of a step
    audit_groups: int | None = 2
    audit_alpha: float = 1e-3  # the chance the audit's e-process ever rings over a run of an exact sampler

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
        require(0 < self.audit_alpha < 1, "audit_alpha", self.audit_alpha, "in (0, 1)",
                "the false-alarm probability over the whole run, e.g. 1e-3")


@dataclass
class AlgorithmConfig:
    advantage: str = "grpo"  # specrl.rl.ADVANTAGES: grpo | dr_grpo | rloo
    policy_loss: str = "clipped"  # specrl.rl.POLICY_LOSSES; register more with specrl.rl.register_policy_loss
    loss_agg: str = "token_mean"  # specrl.rl.AGGREGATIONS
    clip_low: float = 0.2
    clip_high: float = 0.28  # DAPO clip-higher
    kl_coef: float = 0.0  # > 0 adds a KL penalty to the frozen initial policy
    kl_estimator: str = "k3"
    updates_per_step: int = 1  # optimizer steps per RL step (mini-batches); > 1 makes the clip active
    mtp_coef: float = 0.1  # weight of the MTP modules' next-next-token loss, when the policy has them
    is_cap: float = 2.0  # async: a token sampled by older weights has its loss scaled by min(pi_old / pi_gen, is_cap)
    skip_zero_advantage: bool = True  # the same gradient for less work (PolicyTrainer.learning_rows)

    def validate(self) -> None:
        from ..rl import ADVANTAGES, AGGREGATIONS, KL_ESTIMATORS, POLICY_LOSSES
        for key, reg in (("advantage", ADVANTAGES), ("loss_agg", AGGREGATIONS), ("kl_estimator", KL_ESTIMATORS),
                         ("policy_loss", POLICY_LOSSES)):
            require(getattr(self, key) in reg, key, getattr(self, key), f"one of {reg.names}")
        require(0 <= self.clip_low < 1, "clip_low", self.clip_low, "in [0, 1)")
        require_min(self, 0, "clip_high", "kl_coef")
        require(self.updates_per_step >= 1, "updates_per_step", self.updates_per_step, ">= 1")
        require(self.is_cap > 0, "is_cap", self.is_cap, "> 0", "a typical value is 2.0")


@dataclass
class OptimConfig(OptimSettings):
    """The policy's optimizer (specrl.optim's shared settings) and how an update is cut into micro-batches."""
    lr: float = 3e-4
    betas: tuple[float, float] = (0.9, 0.99)
    warmup_steps: int = 3
    min_lr_ratio: float = 0.1
    micro_batch_size: int = 32  # rows per forward/backward; gradients accumulate over a step's micro-batches
    # rows back to back without padding (specrl.train.batch); false: right-padded (docs/results/packing.md)
    packing: bool = True
    # also cap a micro-batch's tokens (packed: its real tokens; padded: rows x longest row); 0: rows only;
    # null: what `activation_memory` holds by trainer.micro_batch_token_cap's estimate
    micro_batch_tokens: int | None = None
    activation_memory: int | str | None = None  # null: trainer.activation_budget (docs/memory.md)
    activation_checkpointing: bool = False  # recompute each decoder layer in the backward (docs/memory.md)
    # bf16 autocast; weights and optimizer state stay in the top-level dtype; null: on when dtype auto picks bf16
    autocast: bool | None = None

    def validate(self) -> None:
        super().validate()
        require(self.micro_batch_size >= 1, "micro_batch_size", self.micro_batch_size, ">= 1")
        require(self.micro_batch_tokens is None or self.micro_batch_tokens >= 0, "micro_batch_tokens",
                self.micro_batch_tokens, ">= 0 or null", "0 caps micro-batches by rows only; null sizes them from "
                "activation_memory")
        require(self.activation_memory is None or is_positive_size(self.activation_memory), "activation_memory",
                self.activation_memory, "a positive size such as 2GiB or 2147483648, or null (sized from the model)")


@dataclass
class ScheduleConfig:
    max_steps: int = 10
    eval_every: int = 5  # steps between held-out evaluations (also at step 0 and at the end); 0: only the ends
    save_every: int = 10  # steps between checkpoints (the last step is always saved)
    keep_last: int = 2  # checkpoints kept on disk

    def validate(self) -> None:
        require_min(self, 1, "max_steps", "save_every")
        require_min(self, 0, "eval_every")
        require(self.keep_last >= 1, "keep_last", self.keep_last, ">= 1", "at least the last checkpoint is kept")


@dataclass
class PipelineConfig:
    # "sync": rollout, then train, then weight sync. "async": a rollout worker generates the next steps
    # with weights at most max_policy_lag versions old while the trainer trains (specrl.pipeline.asynchronous)
    mode: str = "sync"
    max_policy_lag: int = 1
    # async on a CPU: torch threads of each side; 0: half of num_threads (or torch's default) each, at least 1
    rollout_threads: int = 0
    train_threads: int = 0
    backend: str = "local"  # both sides of the pipeline: a row of specrl.pipeline.seam.BACKENDS
    # async: take a new policy version between two engine steps of a running generate(), not at the next
    # call; runs then depend on timing (docs/ray.md, "In-flight updates")
    inflight_updates: bool = False

    def validate(self) -> None:
        require(self.mode in PIPELINE_MODES, "mode", self.mode, f"one of {list(PIPELINE_MODES)}")
        require(self.max_policy_lag >= 0, "max_policy_lag", self.max_policy_lag, ">= 0",
                "0 makes async wait for every update (the sync schedule); 1 overlaps one step")
        require_min(self, 0, "rollout_threads", "train_threads")
        require(not self.inflight_updates or self.mode == "async", "inflight_updates", self.inflight_updates,
                "false with mode=sync", "only the async pipeline updates weights while a rollout runs: set "
                "pipeline.mode=async or drop pipeline.inflight_updates")


@dataclass
class RayConfig:
    """Where the actors of `pipeline.backend=ray` run (docs/ray.md)."""
    address: str | None = None  # None: start Ray on this machine; "auto" or "HOST:PORT": join a running cluster
    rollout_actors: int = 2  # each owns an engine and its drafter; a step's prompt groups are split among them
    rollout_cpus: float = 1.0  # per rollout actor (also its torch threads, at least 1)
    rollout_gpus: float = 0.0
    trainers: int = 1  # trainer processes; 2 or more shard the policy with FSDP2 (gloo on CPU, NCCL on GPU)
    trainer_cpus: float = 1.0  # per trainer process
    trainer_gpus: float = 0.0
    # "colocated": one STRICT_PACK placement group; "split": rollout actors and trainers in two, maybe on two nodes
    placement: str = "split"
    max_restarts: int = 3  # restarts of one rollout actor before the run stops with its last error
    num_cpus: int = 0  # a Ray started here (address=None): CPUs it offers; 0: as many as the actors ask

    def validate(self) -> None:
        require_min(self, 1, "rollout_actors", "trainers")
        require_min(self, 0, "rollout_cpus", "rollout_gpus", "trainer_cpus", "trainer_gpus", "max_restarts", "num_cpus")
        require(self.placement in PLACEMENTS, "placement", self.placement, f"one of {list(PLACEMENTS)}")


@dataclass
class VllmConfig:
    """The engine of `pipeline.backend=vllm` (specrl/pipeline/vllm/, docs/vllm.md); rollout.* sets the rest."""
    enforce_eager: bool = True  # false: vLLM's torch.compile (slower start-up; faster steps where it works)
    refit_dir: str = "/dev/shm"  # where a refit's safetensors are written for vLLM's reload_weights


@dataclass
class TrainConfig:
    model: str | None = None  # HF checkpoint dir; None: the shipped embedded arithmetic policy
    data: DataConfig = field(default_factory=DataConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    vllm: VllmConfig = field(default_factory=VllmConfig)
    out_dir: str = "runs/train"
    seed: int = 0
    resume: str | None = None  # a run directory to continue from its last checkpoint
    device: str = "cpu"
    # "auto": the engine runs what is faster here (specrl/model/precision.py), the trainer fp32 master weights under
    # bf16 autocast when that is bf16; float32 or bfloat16 forces both
    dtype: str = "auto"
    num_threads: int = 0  # torch CPU threads; 0 leaves torch's default
    tensorboard: bool = True
    plots: bool = True
    progress: bool = True
    log_samples: int = 4  # completions written to samples.jsonl each step (prompt, answer, reward); 0: none

    def validate(self) -> None:
        require(self.log_samples >= 0, "log_samples", self.log_samples, ">= 0", "0 writes no samples.jsonl")
        # null budget keys take their resolved values, so that the run's config.yaml records them
        self.rollout.max_tokens, self.data.eval_size, self.data.eval_max_tokens = self.budget
        require(self.dtype in DTYPES or self.dtype == "auto", "dtype", self.dtype, f"auto or one of {sorted(DTYPES)}",
                "float32 keeps logprob_diff ~0; auto measures whether bf16 is faster here")
        for key, value in (("dtype", self.dtype), ("rollout.dtype", self.rollout.dtype)):
            require(self.device != "cpu" or value not in ("float16", "fp16", "half"), key, value,
                    "auto, float32 or bfloat16 on the CPU (it has no fp16 matrix units)", "use auto or bfloat16")
        require(self.num_threads >= 0, "num_threads", self.num_threads, ">= 0")
        d, spec = self.rollout.drafter, self.rollout.spec
        if d.online:
            try:
                model_method(spec, "rollout.drafter.online=true")
            except ValueError as e:
                raise ConfigError(f"rollout.spec.method={spec.method!r}: {e}") from None
            require(self.pipeline.backend != "ray", "rollout.drafter.online", d.online,
                    "false with pipeline.backend=ray (online drafter training runs in-process for now)",
                    "use pipeline.backend=local, or a frozen drafter on Ray")
            require(d.schedule != "beside_trainer" or self.pipeline.mode == "async", "rollout.drafter.schedule",
                    d.schedule, "after_step or long_tail in the sync pipeline", "set pipeline.mode=async")
            require(d.schedule != "long_tail" or self.pipeline.mode == "sync", "rollout.drafter.schedule",
                    d.schedule, "after_step or beside_trainer in the async pipeline", "set pipeline.mode=sync")

    @property
    def budget(self) -> Budget:
        """The response and held-out budgets: each key as set, or the data source's (DataConfig.budget) when null."""
        own = Budget(self.rollout.max_tokens, self.data.eval_size, self.data.eval_max_tokens)
        return Budget(*(v if v is not None else default for v, default in zip(own, self.data.budget)))
