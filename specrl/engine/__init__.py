"""The rollout engine. Public names are imported on first use, so that the torch-free core modules
(`specrl.engine.methods`, `specrl.engine.rng`) can be read without loading the model and torch."""
import importlib

_EXPORTS = {"LLM": ".llm", "CompletionOutput": ".outputs", "RequestOutput": ".outputs",
            "SamplingParams": ".sampling", "SpecConfig": ".methods"}
__all__ = ["LLM", "CompletionOutput", "RequestOutput", "SamplingParams"]


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module 'specrl.engine' has no attribute {name!r}")
