"""The rollout engine, one room a part, each importing only the rooms above it in this list:

    methods.py    SpecConfig and the drafter-method lookup the drafters' registry fills (torch-free)
    sampler.py    SamplingParams, counter-based randomness, logits processors, target_probs, verify (the one
                  rejection sampler), top logprobs, and `sample`, the sampling tail of every step
    sequence.py   bookkeeping, no tensors: Sequence, Scheduler, StepResult, the vLLM-shaped outputs
    memory.py     the KV cache's size from a memory budget, and its storage
    drafting.py   the Drafter interface (Proposal, TargetForward) and the Plan a strategy makes
    runner.py     ModelRunner: the target model and its position-indexed KV cache
    stats.py      the counters across generate() calls, the strategy's choices, the per-step trace
    pool.py       DrafterPool, Deferred, Strategy/StaticStrategy, and how the engine's drafting is built
    steps.py      the kinds of step as tensor work: prefill, decode, draft -> verify -> advance
    engine.py     Engine.step: admit or schedule, run, postprocess
    llm.py        LLM, the vLLM-shaped front
    adaptive/     "auto": the adaptive strategy, its cost model, acceptance counts and constants

Public names are imported on first use, so that the torch-free core module (`specrl.engine.methods`) can be
read without loading the model and torch."""
from ..registry import load

_EXPORTS = {"LLM": "llm", "CompletionOutput": "sequence", "RequestOutput": "sequence",
            "SamplingParams": "sampler", "SpecConfig": "methods"}
__all__ = ["LLM", "CompletionOutput", "RequestOutput", "SamplingParams"]


def __getattr__(name):
    if name in _EXPORTS:
        return load(f"{__name__}.{_EXPORTS[name]}:{name}")
    raise AttributeError(f"module 'specrl.engine' has no attribute {name!r}")
