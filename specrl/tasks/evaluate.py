"""Held-out accuracy of a policy on the embedded tasks, decoded by the rollout engine."""
from __future__ import annotations

from tokenizers import Tokenizer

from .arith import Problem
from .reward import arith_reward


def accuracy(model, tok: Tokenizer, problems: list[Problem], max_new_tokens: int = 1100, temperature: float = 1.0,
             seed: int = 0) -> tuple[float, list[str]]:
    """Fraction of problems whose completion (one a problem, sampled at `temperature`; 0: greedy) earns reward 1,
    and the completions (text, special tokens dropped). Sampled by default: a greedy small policy loops on long
    chains until max_new_tokens."""
    from ..engine import LLM, SamplingParams
    from ..engine.sampling import per_prompt

    if not problems:
        return 0.0, []
    prompts = [tok.encode(p.prompt).ids for p in problems]
    llm = LLM(model, max_num_seqs=min(64, len(prompts)), max_model_len=max(map(len, prompts)) + max_new_tokens)
    params = per_prompt(SamplingParams(temperature=temperature, max_tokens=max_new_tokens, seed=seed), len(prompts))
    outs = llm.generate(prompts, params)  # each stops at the model config's EOS
    texts = [tok.decode(o.outputs[0].token_ids, skip_special_tokens=True) for o in outs]
    rewards = [arith_reward(c, p.answer, p.prompt) for c, p in zip(texts, problems)]
    return sum(rewards) / len(rewards), texts
