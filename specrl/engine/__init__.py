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
    steps.py      the kinds of step as tensor work: prefill, decode, draft -> verify; and advance
    engine.py     Engine.step: schedule (admit, or the strategy's plan) -> run -> postprocess (advance, learn)
    adaptive/     "auto": the adaptive strategy, its cost model, acceptance counts, constants and saved profiles
    llm.py        LLM, the vLLM-shaped front
    faults.py     replaced_verify: the one seam for running the engine with a broken verify (audit, tests)

Code outside the engine (the benchmarks, scripts) imports it only through the public names below, never a
room's module, so that the rooms can change behind them:

    LLM, SamplingParams, SpecConfig, RequestOutput, CompletionOutput   the vLLM-shaped front (also `specrl`'s)
    METHODS, DRAFTING_METHODS, get_method, is_adaptive    the SD methods by name ("auto" is the adaptive one)
    SHIPPED_DRAFTERS_DIR   the embedded policy's trained drafter of each method, one folder a method
    per_prompt     one SamplingParams per prompt, each with its own seed
    Choices        what the adaptive engine chose, step by step (`LLM.record_choices`)
    Verdict, sample_from, replaced_verify   writing and installing a faulty verify (faults.py)

Public names are imported on first use, so that `import specrl.engine`, and the method lookup, do not load the
model and torch."""
from ..registry import load

FRONT = ("LLM", "CompletionOutput", "RequestOutput", "SamplingParams", "SpecConfig")  # `specrl`'s own names too
_EXPORTS = {"LLM": "llm", "CompletionOutput": "sequence", "RequestOutput": "sequence",
            "SamplingParams": "sampler", "SpecConfig": "methods",
            "METHODS": "methods", "DRAFTING_METHODS": "methods", "get_method": "methods", "is_adaptive": "methods",
            "SHIPPED_DRAFTERS_DIR": "methods",
            "per_prompt": "sampler", "Choices": "stats",
            "Verdict": "sampler", "sample_from": "sampler", "replaced_verify": "faults"}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return load(f"{__name__}.{_EXPORTS[name]}:{name}")
    raise AttributeError(f"module 'specrl.engine' has no attribute {name!r}")
