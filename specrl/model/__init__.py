from .causal_lm import CausalLM, ModelOutput
from .checkpoint import ModelFileError, check_device, load_model, resolve_dtype, save_model
from .config import ARCHS, ModelConfig, UnsupportedModelError
from .chat import ChatTemplate, ChatTemplateError
from .tokenizer import TextTokenizer, check_tokenizer_matches, load_text_tokenizer, load_tokenizer

__all__ = ["ARCHS", "CausalLM", "ChatTemplate", "ChatTemplateError", "ModelConfig", "ModelFileError", "ModelOutput",
           "TextTokenizer", "UnsupportedModelError", "check_device", "check_tokenizer_matches", "load_model",
           "load_text_tokenizer", "load_tokenizer", "resolve_dtype", "save_model"]
