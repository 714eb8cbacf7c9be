from .llm import LLM
from .outputs import CompletionOutput, RequestOutput
from .sampling import SamplingParams

__all__ = ["LLM", "CompletionOutput", "RequestOutput", "SamplingParams"]
