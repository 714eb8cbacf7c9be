from .causal_lm import CausalLM, ModelOutput
from .checkpoint import ModelFileError, check_device, load_model, resolve_dtype, save_model
from .config import ARCHS, ModelConfig, UnsupportedModelError
from .tokenizer import check_tokenizer_matches, load_tokenizer

__all__ = ["ARCHS", "CausalLM", "ModelConfig", "ModelFileError", "ModelOutput", "UnsupportedModelError",
           "check_device", "check_tokenizer_matches", "load_model", "load_tokenizer", "resolve_dtype", "save_model"]
