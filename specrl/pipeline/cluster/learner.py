"""`RayLearner`: the pipeline's `Learner` over a group of trainer actors (one, or an FSDP2-sharded group).

Every rank gets the whole batch (see specrl.trainer.fsdp); rank 0 returns the metrics, hands the full
weights to the object store (the drivers pass the reference on: one put per version) and writes the
checkpoints. The run directory must be reachable from rank 0's node (a shared file system off one machine).
`TrainerActor` is a plain class, made remote (`connect.placed`) only when Ray is in use: one learner process,
the whole policy (one trainer) or one FSDP2 shard of it (two or more).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ...config.run import TrainConfig
from ..seam import RunStopped, TrainBatch
from .connect import placed
from .rollout import WeightsRef


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
            from ...trainer.fsdp import FSDPLearner, init_process_group
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


class RayLearner:
    drafter_version = None  # online drafter training runs in-process only (config/run.py refuses it on Ray)

    def __init__(self, actors: list, version: int, pad_id: int):
        self.actors, self.version, self.pad_id = actors, version, pad_id

    def _all(self, method: str, *args) -> list:
        """Every rank runs `method`; a dead trainer process stops the run (resume from its last checkpoint)."""
        import ray
        try:
            return ray.get([getattr(a, method).remote(*args) for a in self.actors])
        except ray.exceptions.RayActorError as e:
            raise RunStopped(f"a trainer actor died during {method}() at policy version {self.version}: "
                             f"{type(e).__name__}: {e}. The run directory holds the last good checkpoint: "
                             "continue with resume=RUN_DIR") from e

    def step(self, batch: TrainBatch, is_cap: float | None = None, rewards=None, audit=None) -> dict[str, float]:
        """Every rank updates; rank 0's metrics, with the sampler audit's test of `audit`'s rows."""
        metrics = self._all("step", batch, is_cap, audit)[0]
        self.version += 1
        return metrics

    def named_weights(self) -> WeightsRef:
        """A reference to rank 0's full weights: iterating it fetches them, a Ray backend passes it on."""
        refs = [a.weights.remote() for a in self.actors]  # every rank joins the gathers; rank 0 returns them
        return WeightsRef(refs[0])

    def save(self, directory: Path) -> None:
        self._all("save", str(directory))

    def load(self, directory: Path) -> None:
        self._all("load", str(directory))


def ray_learner(model_dir: str | Path, cfg: TrainConfig, version: int = 0,
                tokenizer_dir: str | Path | None = None) -> RayLearner:
    """`ray.trainers` trainer actors over the weights in `model_dir`."""
    rc = cfg.ray
    make = placed(rc, "trainer", TrainerActor, num_cpus=rc.trainer_cpus, num_gpus=rc.trainer_gpus)
    actors = [make(r, r, rc.trainers, max(1, int(rc.trainer_cpus))) for r in range(rc.trainers)]
    import ray
    master = ray.get(actors[0].address.remote())
    ray.get([a.setup.remote(str(model_dir), cfg, version, str(tokenizer_dir or model_dir), master) for a in actors])
    pad = json.loads((Path(model_dir) / "config.json").read_text()).get("pad_token_id")
    return RayLearner(actors, version, 0 if pad is None else pad)
