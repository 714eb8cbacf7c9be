"""The rollout engine. Public names are imported on first use, so that the torch-free core module
(`specrl.engine.methods`) can be read without loading the model and torch."""
import importlib

_EXPORTS = {"LLM": ".llm", "CompletionOutput": ".sequence", "RequestOutput": ".sequence",
            "SamplingParams": ".sampler", "SpecConfig": ".methods"}
__all__ = ["LLM", "CompletionOutput", "RequestOutput", "SamplingParams"]


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module 'specrl.engine' has no attribute {name!r}")
