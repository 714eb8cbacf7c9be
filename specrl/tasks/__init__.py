"""The embedded tasks (multi-step lookups with a scratchpad, see arith.py), their tokenizer, reward and base policy.

    from specrl.tasks import make_problems, arith_reward, default_policy_path, task_spec
    problems = make_problems(64, seed=0, split="train")   # the default task, "chain": .prompt, .response, .answer
    short = make_problems(64, seed=0, split="train", spec=task_spec("arith"))
    arith_reward(completion_text, problems[0].answer, problems[0].prompt)  # 1.0 or 0.0
    model = load_model(default_policy_path())              # shipped Qwen3-style base policy
"""
from __future__ import annotations

from pathlib import Path

from .arith import (DEFAULT_TASK, TASKS, ArithSpec, Problem, arith_reward, extract_answer, is_counted, make_problems,
                    task_spec)
from .tokenizer import SpecialIds, build_tokenizer, load_tokenizer, save_tokenizer

POLICY_DIR = Path(__file__).parent / "assets" / "policy"


def default_policy_path() -> Path:
    """Directory of the shipped base policy (HF format: config.json, bf16 safetensors, tokenizer)."""
    if not (POLICY_DIR / "config.json").is_file() or not any(POLICY_DIR.glob("*.safetensors")):
        raise FileNotFoundError(f"the embedded base policy is missing at {str(POLICY_DIR)!r}; build it with "
                                f"`specrl pretrain --out {POLICY_DIR}` (about 20 minutes on 2 CPU cores)")
    return POLICY_DIR


__all__ = ["ArithSpec", "DEFAULT_TASK", "POLICY_DIR", "Problem", "SpecialIds", "TASKS", "arith_reward",
           "build_tokenizer", "default_policy_path", "extract_answer", "is_counted", "load_tokenizer", "make_problems",
           "save_tokenizer", "task_spec"]
