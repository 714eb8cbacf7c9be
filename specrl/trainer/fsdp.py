"""`FSDPLearner`: one rank of a policy sharded with FSDP2 (`torch.distributed.fsdp.fully_shard`), each decoder
layer and the root, so parameters, gradients and AdamW state are split across the ranks (gloo on CPU, NCCL on
GPUs). Every rank trains on the whole batch, so FSDP's averaged gradients are the single-process ones: memory
is sharded, not compute (splitting rows would need the whole batch's loss normaliser on every rank).
Checkpoints are LocalLearner's files, gathered on rank 0.
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Iterator

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     get_optimizer_state_dict, set_optimizer_state_dict)
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from ..audit import AuditRows, LearnerAudit
from ..model import CausalLM, load_model, save_model
from .precision import master_dtype
from ..state_files import load_state, save_state
from .batch import TrainBatch
from .checkpoint import TRAINER_STATE
from ..config.run import TrainConfig
from .trainer import PolicyTrainer

FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def init_process_group(rank: int, world: int, master: str, device: str = "cpu") -> None:
    """Joins the trainers' process group at `master` (HOST:PORT): gloo on CPU, NCCL on CUDA."""
    host, port = master.rsplit(":", 1)
    backend = "nccl" if str(device).startswith("cuda") else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://{host}:{port}", rank=rank, world_size=world,
                            timeout=timedelta(minutes=10))


class FSDPLearner:
    def __init__(self, policy: CausalLM, trainer: PolicyTrainer, version: int, tokenizer_dir: str | Path,
                 audit: LearnerAudit | None):
        self.policy, self.trainer, self.version, self.tokenizer_dir = policy, trainer, version, tokenizer_dir
        self.audit = audit  # the sampler audit's side, None with rollout.audit=off

    @classmethod
    def build(cls, model_dir: str | Path, cfg: TrainConfig, version: int = 0,
              tokenizer_dir: str | Path | None = None) -> "FSDPLearner":
        if not dist.is_initialized():
            raise RuntimeError("FSDPLearner needs a process group: call init_process_group(rank, world, "
                               "'HOST:PORT') in every trainer process first")
        if cfg.algorithm.kl_coef > 0:
            raise ValueError(f"algorithm.kl_coef={cfg.algorithm.kl_coef}: the KL reference is not sharded yet; "
                             "use ray.trainers=1 or kl_coef=0")
        policy = load_model(model_dir, device=cfg.device, dtype=master_dtype(cfg.dtype))
        for layer in policy.model.layers:  # each decoder layer, then the rest (embeddings, norm, lm_head, MTP)
            fully_shard(layer)
        fully_shard(policy)
        trainer = PolicyTrainer(policy, cfg.algorithm, cfg.optim, cfg.schedule.max_steps, cfg.rollout.temperature,
                                cfg.budget.max_tokens)
        return cls(policy, trainer, version, tokenizer_dir or model_dir, LearnerAudit.build(cfg.rollout, cfg.seed, False))

    def step(self, batch: TrainBatch, is_cap: float | None = None, audit: AuditRows | None = None) -> dict[str, float]:
        """The update; the sampler audit tests `audit`'s rows when this version sampled them (every rank holds
        the whole batch, so each scores them alike). Rows of an older version are not audited: unlike
        LocalLearner, no unsharded copy of the previous weights is kept."""
        sampler = self.audit.begin(self.trainer, self.policy, self.version, batch, audit) if self.audit else None
        self.trainer.logits_hook = sampler
        try:
            metrics = self.trainer.step(batch, is_cap=is_cap)
        finally:
            self.trainer.logits_hook = None
        if sampler is not None:
            metrics.update(sampler.metrics())
        self.version += 1
        return metrics

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The full weights, gathered: every rank must iterate it (each tensor is an all-gather)."""
        for name, tensor in self.policy.state_dict().items():
            yield name, (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach()

    def save(self, directory: Path) -> None:
        weights = get_model_state_dict(self.policy, options=FULL)  # collective; full on rank 0 only
        optim = get_optimizer_state_dict(self.policy, self.trainer.optimizer, options=FULL)
        if dist.get_rank() == 0:
            with torch.device("meta"):
                plain = CausalLM(self.policy.config)  # unsharded, to hold the gathered weights
            plain.load_state_dict(weights, assign=True)
            save_model(plain, directory / "model", tokenizer_dir=self.tokenizer_dir)
            save_state(directory, TRAINER_STATE, {"optimizer": optim, "scheduler": self.trainer.scheduler.state_dict(),
                                                  "ref_model": None, "torch_rng": torch.get_rng_state()})
        dist.barrier()

    def load(self, directory: Path) -> None:
        """The optimizer state and RNG of `directory`; the weights were loaded by `build` from its model/."""
        state = load_state(directory, TRAINER_STATE)
        torch.set_rng_state(state["torch_rng"].cpu())
        self.trainer.scheduler.load_state_dict(state["scheduler"])
        set_optimizer_state_dict(self.policy, self.trainer.optimizer, state["optimizer"],
                                 options=StateDictOptions(full_state_dict=True))

