"""A tiny policy and prompt file for the benches that run `specrl train` (in child processes, so the reward is a
shipped one): a run of a step in seconds."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import save_tiny


@pytest.fixture(scope="session")
def tiny_task(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("bench_task")
    model = save_tiny(tmp / "model", vocab=32, max_pos=96)
    data = tmp / "data.jsonl"
    rows = [{"prompt": f"t{4 + i % 10} t{5 + i % 7} t{6 + i % 5}", "answer": "7"} for i in range(30)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return model, data


@pytest.fixture(scope="session")
def tiny_task_policy(tmp_path_factory) -> Path:
    """A tiny random policy with the embedded task's tokenizer: the benches that encode the task's problems."""
    from specrl.model import load_model
    from specrl.tasks import default_policy_path
    shipped = default_policy_path()
    path = save_tiny(tmp_path_factory.mktemp("bench_policy") / "model",
                     vocab=load_model(shipped).config.vocab_size, max_pos=256)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        shutil.copy(shipped / name, path / name)
    return path


def train_overrides(model: Path, data: Path, steps: int = 1, method: str | None = "suffix") -> list[str]:
    """`specrl train` overrides (full keys) of a run of `steps` steps on the tiny task (SD `method`, or the
    bench's own choice when None)."""
    keys = {"model": model, "data.source": data, "data.eval_size": 2, "data.eval_max_tokens": 4,
            "reward.name": "flexible", "rollout.max_tokens": 8, "rollout.prompts_per_step": 2, "rollout.n": 2,
            "schedule.max_steps": steps, "schedule.eval_every": steps,
            "optim.micro_batch_size": 4, "dtype": "float32", "plots": False, "tensorboard": False}
    keys.update({"rollout.spec.method": method} if method else {})
    return [f"{k}={v}" for k, v in keys.items()]
