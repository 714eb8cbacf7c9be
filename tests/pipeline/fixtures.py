"""A tiny policy, a JSONL prompt set and a toy reward: a whole `specrl train` run in seconds."""
from __future__ import annotations

import json
from pathlib import Path

from specrl.train.rewards import REWARDS, register_reward
from tests.helpers import save_tiny

TIMING_KEYS = {"rollout_s", "reward_s", "train_s", "sync_s", "step_s", "gen_tokens_per_s", "eval_s", "wait_rollout_s",
               "drafter_train_s", "drafter_sync_s", "sampler_s"}

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
