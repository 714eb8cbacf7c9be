"""specrl: RL post-training with lossless speculative decoding."""
from .engine import LLM, CompletionOutput, RequestOutput, SamplingParams
from .spec import SpecConfig

__all__ = ["LLM", "CompletionOutput", "RequestOutput", "SamplingParams", "SpecConfig"]
__version__ = "0.1.0"
