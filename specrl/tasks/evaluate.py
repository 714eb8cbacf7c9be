"""Held-out accuracy of a policy on the embedded tasks, decoded by the rollout engine."""
from __future__ import annotations

from tokenizers import Tokenizer

from .arith import Problem
from .reward import arith_reward
from .tokenizer import SpecialIds


def completions(model, tok: Tokenizer, problems: list[Problem], max_new_tokens: int, temperature: float = 1.0,
                seed: int = 0, max_num_seqs: int = 64) -> list[str]:
    """One completion per problem (text, special tokens dropped), sampled at `temperature` (0: greedy)."""
    from ..engine import LLM, SamplingParams
    from ..engine.sampling import per_prompt

    prompts = [tok.encode(p.prompt).ids for p in problems]
    longest = max(len(p) for p in prompts) + max_new_tokens
    llm = LLM(model, max_num_seqs=min(max_num_seqs, len(prompts)), max_model_len=longest)
    params = per_prompt(SamplingParams(temperature=temperature, max_tokens=max_new_tokens, seed=seed), len(prompts))
    outs = llm.generate(prompts, params)  # each stops at the model config's EOS
    return [tok.decode(o.outputs[0].token_ids, skip_special_tokens=True) for o in outs]


def accuracy(model, tok: Tokenizer, ids: SpecialIds, problems: list[Problem], max_new_tokens: int = 1100,
             temperature: float = 1.0, seed: int = 0) -> tuple[float, list[str]]:
    """Fraction of problems whose completion (sampled at `temperature`; 0: greedy) earns reward 1, and the
    completions. Sampled by default: a greedy small policy loops on long chains until max_new_tokens."""
    if not problems:
        return 0.0, []
    texts = completions(model, tok, problems, max_new_tokens, temperature, seed)
    rewards = [arith_reward(c, p.answer, p.prompt) for c, p in zip(texts, problems)]
    return sum(rewards) / len(rewards), texts
