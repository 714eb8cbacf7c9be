"""`TrainConfig`: the typed config tree of `specrl train` (YAML file plus `key.sub=value` overrides), with its
sections of the policy update and the pipeline here and those of the data (data.py) and the rollout
(rollout.py) beside it. The defaults are the recipe it runs with no arguments: GRPO on the shipped arithmetic
policy with adaptive ("auto") speculative decoding, sized for a 2-core CPU."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.methods import model_method
from ..model.checkpoint import DTYPES
from ..optim import OptimSettings
from .build import ConfigError, require, require_min
from .choices import IS_CORRECTIONS, PIPELINE_MODES, PLACEMENTS
from .data import Budget, DataConfig, RewardConfig
from .rollout import RolloutConfig, is_positive_size


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
    # which rollouts get that ratio: "stale" (sampled by older weights), "mismatch" (also every rollout whose
    # engine computes in another precision than the trainer, e.g. dtype auto's bf16 engine: pi_gen is then not
    # the trainer's pi_old even in sync), "always"
    is_correction: str = "mismatch"
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
        require(self.is_correction in IS_CORRECTIONS, "is_correction", self.is_correction,
                f"one of {list(IS_CORRECTIONS)}", "mismatch corrects stale and mixed-precision rollouts")


@dataclass
class OptimConfig(OptimSettings):
    """The policy's optimizer (specrl.optim's shared settings) and how an update is cut into micro-batches."""
    lr: float = 3e-4
    betas: tuple[float, float] = (0.9, 0.99)
    warmup_steps: int = 3
    min_lr_ratio: float = 0.1
    micro_batch_size: int = 32  # rows per forward/backward; gradients accumulate over a step's micro-batches
    # rows back to back without padding (specrl.trainer.batch); false: right-padded (docs/results/packing.md)
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
    backend: str = "local"  # both sides of the pipeline: a row of specrl.pipeline.backends.BACKENDS
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


# `max_steps=N` is what people type; it means `schedule.max_steps=N`
SHORTCUTS = {"max_steps": "schedule.max_steps", "eval_every": "schedule.eval_every",
             "save_every": "schedule.save_every", "keep_last": "schedule.keep_last", "lr": "optim.lr",
             "n": "rollout.n", "prompts_per_step": "rollout.prompts_per_step", "method": "rollout.spec.method"}


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
