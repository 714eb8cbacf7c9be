"""A tiny policy, a JSONL prompt set and a toy reward: a whole `specrl train` run in seconds."""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

from safetensors.torch import load_file

from specrl.trainer.rewards import REWARDS, register_reward
from tests.helpers import save_tiny

TIMING_KEYS = {"rollout_s", "reward_s", "train_s", "sync_s", "step_s", "gen_tokens_per_s", "eval_s", "wait_rollout_s",
               "drafter_train_s", "drafter_sync_s", "sampler_s", "sampler_score_s", "sampler_share"}

if "has_t7" not in REWARDS:
    @register_reward("has_t7")
    def has_t7(completion: str, answer: str, prompt: str = "") -> float:
        """1 when the completion contains token t7: a reward the random policy earns now and then."""
        return float("t7" in completion.split())

if "constant_half" not in REWARDS:
    @register_reward("constant_half")
    def constant_half(completion: str, answer: str, prompt: str = "") -> float:
        """The same reward for every completion: no learning signal."""
        return 0.5


def make_setup(tmp: Path) -> tuple[Path, Path]:
    model = save_tiny(tmp / "model", vocab=32, max_pos=96)
    data = tmp / "data.jsonl"
    rows = [{"prompt": f"t{4 + i % 10} t{5 + i % 7} t{6 + i % 5}", "answer": "t7"} for i in range(30)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return model, data


def overrides(model: Path, data: Path, out: Path, **kw) -> list[str]:
    base = {"model": model, "data.source": data, "data.eval_size": 4, "data.eval_max_tokens": 8,
            "reward.name": "has_t7", "rollout.max_tokens": 10, "rollout.prompts_per_step": 3, "rollout.n": 4,
            "rollout.spec.method": "suffix", "schedule.max_steps": 4, "schedule.eval_every": 2,
            "schedule.save_every": 2, "optim.lr": 1e-3, "optim.warmup_steps": 1, "optim.micro_batch_size": 5,
            "out_dir": out, "progress": False, "plots": False, "tensorboard": False}
    base.update(kw)
    return [f"{k}={v}" for k, v in base.items()]


def strip_timings(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]


class Shared:
    """A module's engine as one run's backend: the run's starting weights (a checkpoint's on resume) are
    refitted in at build, its drafter's version starts at 0 again (the run's forced first sync reloads the run's
    own drafter), and close() only counts (the engine serves the next run)."""

    def __init__(self, engine, weights_dir: Path):
        engine._cancelled = False  # a cancelled run's flag is sticky by design
        engine.weights_version = engine.drafter_version = 0
        engine._pending_drafter = None
        weights = {}
        for f in sorted(Path(weights_dir).glob("*.safetensors")):
            weights.update(load_file(str(f)))
        engine.update_weights(weights.items(), 0)
        self.engine = engine
        self.closed = 0

    @property
    def weights_version(self) -> int:
        return self.engine.weights_version

    @weights_version.setter
    def weights_version(self, version: int) -> None:
        self.engine.weights_version = version

    def __getattr__(self, name):  # everything else is the engine's own
        return getattr(self.engine, name)

    def close(self) -> None:
        self.closed += 1


@contextmanager
def shared_backend(name: str, engine):
    """Registers backend `name`: every run built with it is served by `engine` (a `Shared` each, yielded as
    they are made), so a module's runs pay one engine start."""
    from specrl.pipeline.backends import BACKENDS, register_backend
    made: list[Shared] = []

    def make(weights_dir, cfg, trace_path=None):
        made.append(Shared(engine, weights_dir))
        return made[-1]
    register_backend(name, make)
    try:
        yield made
    finally:
        BACKENDS.pop(name)


IN_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


@contextmanager
def in_process_vllm():
    """vLLM engines built inside the block run their engine core and worker in this process: no spawned process
    imports vLLM again, so a start takes seconds (docs/vllm.md). For tests of what an engine computes from one
    thread. Tests of its processes (a kill, SIGTERM, reaping) keep the engine process, and so do runs that call
    the engine from two threads (an async run's refits): the engine process serializes those calls, the
    in-process client does not. OMP threads stay unpinned (they would pin this process's), and what an engine
    core's start leaves in the process is undone: vLLM's cached environment, its frozen GC heap, and its CPU
    worker's no-op in place of `torch.set_num_threads`."""
    import gc

    import torch
    import vllm.envs
    saved = {k: os.environ.get(k) for k in IN_PROCESS}
    set_threads, threads = torch.set_num_threads, torch.get_num_threads()
    os.environ.update(IN_PROCESS)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v
        vllm.envs.disable_envs_cache()
        gc.unfreeze()
        torch.set_num_threads = set_threads
        torch.set_num_threads(threads)
