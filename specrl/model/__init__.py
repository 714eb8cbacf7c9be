from .causal_lm import CausalLM, ModelOutput
from .checkpoint import load_model, resolve_dtype, save_model
from .config import ARCHS, ModelConfig, UnsupportedModelError
from .tokenizer import check_tokenizer_matches, load_tokenizer

__all__ = ["ARCHS", "CausalLM", "ModelConfig", "ModelOutput", "UnsupportedModelError", "check_tokenizer_matches",
           "load_model", "load_tokenizer", "resolve_dtype", "save_model"]
