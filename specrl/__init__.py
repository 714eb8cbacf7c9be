"""specrl: RL post-training with lossless speculative decoding. The public names are imported on first use,
so that `specrl simulate` and other light commands do not pay for importing torch."""
from . import engine as _engine
from .drafters import registry as _registry  # noqa: F401 (hands the method registry to the engine, torch-free)

__version__ = "0.1.0"
__all__ = list(_engine.FRONT)


def __getattr__(name):
    # the engine's vLLM-shaped front, lazily, as specrl's own names; the rest of its surface stays specrl.engine's
    if name in _engine.FRONT:
        return getattr(_engine, name)
    raise AttributeError(f"module 'specrl' has no attribute {name!r}")
