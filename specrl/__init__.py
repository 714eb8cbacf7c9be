"""specrl: RL post-training with lossless speculative decoding.

The public names are imported on first use, so that `specrl simulate` and other light commands do not pay
for importing torch.
"""
import importlib

__version__ = "0.1.0"
_EXPORTS = {"LLM": "specrl.engine", "CompletionOutput": "specrl.engine", "RequestOutput": "specrl.engine",
            "SamplingParams": "specrl.engine", "SpecConfig": "specrl.engine.methods"}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'specrl' has no attribute {name!r}")
