"""The drafters. Their settings, the table of methods and the by-name lookup live in the engine core
(`specrl.engine.methods`) and are re-exported here."""
from ..engine.methods import MAX_SPEC_TOKENS, METHODS, TABLE, SpecConfig, build_drafter, get_method

__all__ = ["MAX_SPEC_TOKENS", "METHODS", "TABLE", "SpecConfig", "build_drafter", "get_method"]
