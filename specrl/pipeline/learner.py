"""The in-process learner: the policy trainer (specrl.trainer) and the online drafter trainer
(specrl.drafters) behind the pipeline's `Learner` protocol, so that specrl.trainer imports no drafter code.

With `rollout.drafter.online` the policy update's forward captures the drafter's inputs (`forward_hook`) and
an `OnlineDrafterTrainer` distils them into its copy of the drafter, which the pipeline hot-swaps into the
engine; `defer_drafter` (the long_tail schedule) keeps the data for `train_drafter()` in the next rollout's tail.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import torch

from ..audit import AuditRows, LearnerAudit
from ..drafters.training.capture import DrafterBatch
from ..drafters.training.online import OnlineDrafterTrainer, batch_from_dict
from ..model import CausalLM, load_model, save_model
from ..trainer.precision import master_dtype
from ..state_files import has_state, load_state, save_state
from ..trainer.batch import TrainBatch
from ..trainer.checkpoint import TRAINER_STATE
from ..config.run import TrainConfig
from ..trainer.trainer import PolicyTrainer

DRAFTER_TRAINER_STATE = "drafter_trainer"


class LocalLearner:
    def __init__(self, policy: CausalLM, trainer: PolicyTrainer, version: int = 0,
                 tokenizer_dir: str | Path | None = None, drafter: OnlineDrafterTrainer | None = None,
                 defer_drafter: bool = False):
        self.policy, self.trainer, self.version = policy, trainer, version
        self.tokenizer_dir = tokenizer_dir
        self.drafter, self.defer_drafter = drafter, defer_drafter
        # captured, not yet trained: (batches, rewards, probe rows)
        self._pending: tuple[list[DrafterBatch], torch.Tensor | None, list[DrafterBatch]] | None = None
        self._drafter_metrics: dict[str, float] = {}  # of a deferred update, reported with the next step
        self.audit: LearnerAudit | None = None  # the sampler audit's side, None with rollout.audit=off

    @classmethod
    def build(cls, model_dir: str | Path, cfg: TrainConfig, version: int = 0,
              tokenizer_dir: str | Path | None = None) -> "LocalLearner":
        policy = load_model(model_dir, device=cfg.device, dtype=master_dtype(cfg.dtype))
        trainer = PolicyTrainer(policy, cfg.algorithm, cfg.optim, cfg.schedule.max_steps, cfg.rollout.temperature,
                                cfg.budget.max_tokens)
        d, drafter = cfg.rollout.drafter, None
        if d.online:  # the probe's pi_0 is the run's base policy (tokenizer_dir: model_dir(cfg), also on resume)
            pi0 = load_model(tokenizer_dir or model_dir, device=cfg.device, dtype=master_dtype(cfg.dtype)) \
                if d.probe_fraction > 0 else None
            drafter = OnlineDrafterTrainer.from_spec(cfg.rollout.spec, policy, d, cfg.rollout.temperature, cfg.seed,
                                                     cfg.rollout.n, pi0)
        learner = cls(policy, trainer, version, tokenizer_dir or model_dir, drafter, d.schedule == "long_tail")
        lagged = cfg.pipeline.mode == "async" and cfg.pipeline.max_policy_lag > 0
        learner.audit = LearnerAudit.build(cfg.rollout, cfg.seed, lagged, lambda: load_model(
            model_dir, device=cfg.device, dtype=master_dtype(cfg.dtype)))
        return learner

    @property
    def pad_id(self) -> int:
        pad = self.policy.config.pad_token_id
        return 0 if pad is None else pad

    def step(self, batch: TrainBatch, is_cap: float | None = None, rewards: torch.Tensor | None = None,
             audit: AuditRows | None = None) -> dict[str, float]:
        """The policy update; with an online drafter, its update on the data this forward captured (now, or
        deferred to `train_drafter`, whose metrics then come with the next step's)."""
        sampler = self.audit.begin(self.trainer, self.policy, self.version, batch, audit) if self.audit else None
        # installed for this step only: afterwards the hook would keep the captured data alive
        self.trainer.forward_hook = capture = self.drafter.forward_hook() if self.drafter is not None else None
        self.trainer.logits_hook = sampler if sampler is not None and sampler.on_policy else None
        try:
            metrics = self.trainer.step(batch, is_cap=is_cap)
        finally:
            self.trainer.forward_hook = self.trainer.logits_hook = None
        if sampler is not None:
            metrics.update(sampler.metrics())
        self.version += 1
        if self.drafter is not None:
            self._pending = (capture.batches, rewards, capture.probe)
            if not self.defer_drafter:
                self.train_drafter()
            metrics.update(self._drafter_metrics)
            self._drafter_metrics = {}
        return metrics

    def train_drafter(self) -> bool:
        if self.drafter is None or self._pending is None:
            return False
        t0 = time.perf_counter()
        self._drafter_metrics = self.drafter.step(*self._pending)
        self._drafter_metrics["drafter_train_s"] = time.perf_counter() - t0
        self._pending = None
        return True

    @property
    def drafter_version(self) -> int | None:
        return None if self.drafter is None else self.drafter.version

    def drafter_weights(self) -> list[tuple[str, torch.Tensor]]:
        return self.drafter.named_weights()

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        return ((name, tensor.detach()) for name, tensor in self.policy.state_dict().items())

    def save(self, directory: Path) -> None:
        save_model(self.policy, directory / "model", tokenizer_dir=self.tokenizer_dir)
        save_state(directory, TRAINER_STATE, {**self.trainer.state_dict(), "torch_rng": torch.get_rng_state()})
        if self.drafter is not None:
            pending = None if self._pending is None else {
                "batches": [b._asdict() for b in self._pending[0]], "rewards": self._pending[1],
                "probe": [b._asdict() for b in self._pending[2]]}
            save_state(directory, DRAFTER_TRAINER_STATE, {**self.drafter.state_dict(), "pending": pending,
                                                          "metrics": self._drafter_metrics})
            self.drafter.save_drafter(directory / "drafter")  # loadable as is, and by `specrl export-drafter`

    def load(self, directory: Path) -> None:
        """The optimizer state and torch RNG of `directory`; the weights were loaded by `build` from its model/."""
        if not has_state(directory, TRAINER_STATE) and (directory / "trainer.pt").is_file():
            raise ValueError(f"{str(directory)!r} holds trainer.pt, a pickle-based file: "
                             "specrl never unpickles files; start a new run from its model/ (model=DIR/model)")
        state = load_state(directory, TRAINER_STATE, device=self.trainer.device)
        torch.set_rng_state(state.pop("torch_rng").cpu())
        self.trainer.load_state_dict(state)
        if self.drafter is not None and has_state(directory, DRAFTER_TRAINER_STATE):
            dstate = load_state(directory, DRAFTER_TRAINER_STATE, device=self.trainer.device)
            pending, self._drafter_metrics = dstate.pop("pending"), dstate.pop("metrics")
            self.drafter.load_state_dict(dstate)
            self._pending = None if pending is None else (
                [batch_from_dict(b) for b in pending["batches"]], pending["rewards"],
                [batch_from_dict(b) for b in pending.get("probe", [])])
