from .config import MAX_K, METHODS, SpecConfig
from .registry import build_drafter

__all__ = ["MAX_K", "METHODS", "SpecConfig", "build_drafter"]
