"""Speculative-decoding settings: defined in the engine core (`specrl.engine.methods`), re-exported here."""
from ..engine.methods import MAX_SPEC_TOKENS, METHODS, SpecConfig

__all__ = ["MAX_SPEC_TOKENS", "METHODS", "SpecConfig"]
