"""The Ray actors' bodies: plain classes, made remote (`connect.placed`) only when Ray is in use.

A rollout actor owns one in-process engine (the "local" backend's) and its drafter; a trainer actor owns one
learner process: the whole policy (one trainer) or one FSDP2 shard of it (two or more).
"""
from __future__ import annotations

import threading
from pathlib import Path

import torch

from ...train.config import TrainConfig
from ..seam import IN_PROCESS_ENGINE, TrainBatch, get_backend, load


class RolloutActor:
    def __init__(self, model_dir: str | Path, cfg: TrainConfig, threads: int):
        torch.set_num_threads(threads)
        self.backend = load(get_backend(IN_PROCESS_ENGINE).rollout)(model_dir, cfg)
        self._busy = threading.Event()

    def generate(self, prompts: list[list[int]], params: list, tags: dict) -> tuple[list, dict, int]:
        """(outputs, the engine's counters over this call, the weights version that generated them)."""
        self._busy.set()
        try:
            self.backend.reset_stats()
            self.backend.set_trace_tags(tags)
            outs = self.backend.generate(prompts, params)
            return outs, self.backend.stats(), self.backend.weights_version
        finally:
            self._busy.clear()

    def busy(self) -> bool:
        return self._busy.is_set()

    def update_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        self.backend.update_weights(weights.items(), version)

    def set_version(self, version: int) -> None:
        self.backend.weights_version = version

    def update_drafter(self, weights: dict[str, torch.Tensor], version: int) -> None:
        self.backend.update_drafter(weights.items(), version)

    def cancel(self) -> None:
        self.backend.cancel()

    def drafter_state(self) -> dict | None:
        return self.backend.drafter_state()

    def load_drafter_state(self, state: dict) -> None:
        self.backend.load_drafter_state(state)

    def close(self) -> None:
        self.backend.close()


class TrainerActor:
    """Rank `rank` of `world` trainer processes; rank 0 hands out the full weights and writes checkpoints."""

    def __init__(self, rank: int, world: int, threads: int):
        torch.set_num_threads(threads)
        self.rank, self.world = rank, world

    def address(self) -> str:
        """HOST:PORT on this actor's node for the process group's rendezvous (rank 0's is used)."""
        import socket
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return f"{socket.gethostbyname(socket.gethostname())}:{port}"

    def setup(self, model_dir: str, cfg: TrainConfig, version: int, tokenizer_dir: str, master: str) -> None:
        """Builds this rank's learner; with two or more ranks every rank must call it at once."""
        if self.world == 1:
            from ..learner import LocalLearner
            self.learner = LocalLearner.build(model_dir, cfg, version, tokenizer_dir=tokenizer_dir)
        else:
            from ...train.fsdp import FSDPLearner, init_process_group
            init_process_group(self.rank, self.world, master, cfg.device)
            self.learner = FSDPLearner.build(model_dir, cfg, version, tokenizer_dir=tokenizer_dir)

    def step(self, batch: TrainBatch, is_cap: float | None, audit=None) -> dict[str, float]:
        return self.learner.step(batch, is_cap, audit=audit)

    def weights(self) -> dict[str, torch.Tensor] | None:
        """The full weights on rank 0 (into the object store once, as this task's return value)."""
        state = dict(self.learner.named_weights())  # every rank joins the FSDP all-gathers
        return state if self.rank == 0 else None

    def save(self, directory: str) -> None:
        self.learner.save(Path(directory))

    def load(self, directory: str) -> None:
        self.learner.load(Path(directory))
