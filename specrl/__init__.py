"""specrl: RL post-training with lossless speculative decoding. The public names are imported on first use,
so that `specrl simulate` and other light commands do not pay for importing torch."""
from .engine import _EXPORTS, __getattr__  # noqa: F401 (the engine's public names, lazily, as specrl's own)
from .drafters import registry as _registry  # noqa: F401 (hands the method registry to the engine, torch-free)

__version__ = "0.1.0"
__all__ = list(_EXPORTS)
