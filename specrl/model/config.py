"""Model hyper-parameters, read from and written to Hugging Face `config.json`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class Arch(NamedTuple):
    hf_class: str  # the HF architecture class name
    qkv_bias: bool
    qk_norm: bool  # RMSNorm on q and k
    bias_flags: dict  # the bias flags its config.json carries


ARCHS = {  # model_type -> Arch
    "llama": Arch("LlamaForCausalLM", False, False, {"attention_bias": False, "mlp_bias": False}),
    "qwen2": Arch("Qwen2ForCausalLM", True, False, {}),
    "qwen3": Arch("Qwen3ForCausalLM", False, True, {"attention_bias": False}),
}


class UnsupportedModelError(ValueError):
    pass


@dataclass
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int = 0  # 0 -> hidden_size // num_heads
    arch: str = "qwen3"
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = True
    bos_token_id: int | None = None
    eos_token_id: list[int] = field(default_factory=list)
    pad_token_id: int | None = None
    num_mtp_modules: int = 0  # DeepSeek-V3 style multi-token-prediction modules stored with the policy

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise UnsupportedModelError(f"unsupported architecture {self.arch!r}; supported: {sorted(ARCHS)} "
                                        f"(HF classes {[a.hf_class for a in ARCHS.values()]})")
        if self.head_dim == 0:
            self.head_dim = self.hidden_size // self.num_heads
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} must be a multiple of num_kv_heads={self.num_kv_heads}")
        if isinstance(self.eos_token_id, int):
            self.eos_token_id = [self.eos_token_id]

    @property
    def qkv_bias(self) -> bool:
        return ARCHS[self.arch].qkv_bias

    @property
    def qk_norm(self) -> bool:
        return ARCHS[self.arch].qk_norm

    @property
    def num_params(self) -> int:
        d, hd = self.hidden_size, self.head_dim
        attn = d * hd * (self.num_heads * 2 + self.num_kv_heads * 2)
        attn += hd * (self.num_heads + 2 * self.num_kv_heads) if self.qkv_bias else 0
        attn += 2 * hd if self.qk_norm else 0
        layer = attn + 3 * d * self.intermediate_size + 2 * d
        emb = self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * layer + emb + d

    @classmethod
    def from_hf(cls, hf: dict) -> "ModelConfig":
        model_type = hf.get("model_type")
        if model_type not in ARCHS:
            raise UnsupportedModelError(
                f"unsupported model_type {model_type!r} (architectures={hf.get('architectures')}); specrl supports "
                f"{sorted(ARCHS)} ({', '.join(a.hf_class for a in ARCHS.values())}). Convert the checkpoint or "
                "use a Llama/Qwen2/Qwen3-family model.")
        rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", None):
            raise UnsupportedModelError(f"rope_type {rope_type!r} is not supported yet; only 'default' RoPE is")
        if model_type == "llama" and (hf.get("attention_bias") or hf.get("mlp_bias")):
            raise UnsupportedModelError("llama with attention_bias/mlp_bias=True is not supported")
        eos = hf.get("eos_token_id")
        return cls(vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
                   intermediate_size=hf["intermediate_size"], num_layers=hf["num_hidden_layers"],
                   num_heads=hf["num_attention_heads"],
                   num_kv_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
                   head_dim=hf.get("head_dim") or 0, arch=model_type,
                   rope_theta=float(rope.get("rope_theta", hf.get("rope_theta", 10000.0))),
                   rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
                   max_position_embeddings=hf.get("max_position_embeddings", 2048),
                   tie_word_embeddings=hf.get("tie_word_embeddings", False), bos_token_id=hf.get("bos_token_id"),
                   eos_token_id=[] if eos is None else ([eos] if isinstance(eos, int) else list(eos)),
                   pad_token_id=hf.get("pad_token_id"), num_mtp_modules=hf.get("num_nextn_predict_layers", 0) or 0)

    def to_hf(self) -> dict:
        hf = {"architectures": [ARCHS[self.arch].hf_class], "model_type": self.arch, "vocab_size": self.vocab_size,
              "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
              "num_hidden_layers": self.num_layers, "num_attention_heads": self.num_heads,
              "num_key_value_heads": self.num_kv_heads, "head_dim": self.head_dim, "hidden_act": "silu",
              "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta,
              "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
              "max_position_embeddings": self.max_position_embeddings, "tie_word_embeddings": self.tie_word_embeddings,
              "bos_token_id": self.bos_token_id,
              "eos_token_id": self.eos_token_id[0] if len(self.eos_token_id) == 1 else self.eos_token_id,
              "pad_token_id": self.pad_token_id, "attention_dropout": 0.0, "use_cache": True}
        hf.update(ARCHS[self.arch].bias_flags)
        if self.num_mtp_modules:
            hf["num_nextn_predict_layers"] = self.num_mtp_modules
        return hf
