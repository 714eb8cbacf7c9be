"""Model specs for the cost model: dense and MoE decoders, built from an HF config.json."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int  # dense MLP width (unused when every layer is MoE)
    num_experts: int = 0  # 0 = dense
    experts_per_tok: int = 0
    moe_intermediate: int = 0
    tie_embeddings: bool = False

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def attn_params(self) -> int:
        """q, k, v, o projections of one layer."""
        q_o = 2 * self.hidden * self.heads * self.head_dim
        return q_o + 2 * self.hidden * self.kv_heads * self.head_dim

    @property
    def expert_params(self) -> int:
        """All routed experts of all layers (gate, up, down)."""
        return self.layers * self.num_experts * 3 * self.hidden * self.moe_intermediate

    @property
    def embed_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tie_embeddings else 2)

    @property
    def dense_params(self) -> int:
        """Parameters read by every forward regardless of routing: attention, dense MLP, embeddings."""
        mlp = 0 if self.is_moe else 3 * self.hidden * self.intermediate
        return self.layers * (self.attn_params + mlp) + self.embed_params

    @property
    def total_params(self) -> int:
        return self.dense_params + self.expert_params

    @property
    def active_params(self) -> int:
        """Parameters one token touches."""
        per_tok = self.layers * self.experts_per_tok * 3 * self.hidden * self.moe_intermediate
        return self.dense_params + per_tok

    @property
    def matmul_params(self) -> int:
        """Active parameters that do matmuls (the input embedding is a lookup)."""
        return self.active_params - self.vocab * self.hidden

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def summary(self) -> dict:
        return {"name": self.name, "total_params": self.total_params,
                "active_params": self.active_params, "layers": self.layers, "hidden": self.hidden,
                "heads": self.heads, "kv_heads": self.kv_heads, "vocab": self.vocab,
                "moe": self.is_moe}


def from_hf_config(cfg: dict, name: str = "hf") -> ModelSpec:
    """Build a spec from an HF config dict (Llama, Qwen2/3, Qwen3-MoE, Mixtral key names)."""
    layers = cfg.get("num_hidden_layers", cfg.get("num_layers"))
    if layers is None or "hidden_size" not in cfg:
        raise ValueError(f"config {name!r} lacks num_hidden_layers/hidden_size; expected an HF "
                         "decoder config.json (Llama/Qwen/Mixtral).")
    heads = cfg["num_attention_heads"]
    experts = cfg.get("num_experts", cfg.get("num_local_experts", cfg.get("n_routed_experts", 0)))
    return ModelSpec(
        name=name, layers=layers, hidden=cfg["hidden_size"], heads=heads,
        kv_heads=cfg.get("num_key_value_heads", cfg.get("num_kv_heads", heads)),
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
        vocab=cfg["vocab_size"], intermediate=cfg.get("intermediate_size", 0),
        num_experts=experts or 0, experts_per_tok=cfg.get("num_experts_per_tok", 0) if experts else 0,
        moe_intermediate=cfg.get("moe_intermediate_size", cfg.get("intermediate_size", 0)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)))


# Values from the public config.json files on the Hugging Face Hub (Qwen/Qwen3-8B, Qwen/Qwen3-235B-A22B).
QWEN3_8B = {"num_hidden_layers": 36, "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
            "intermediate_size": 12288, "tie_word_embeddings": False}
QWEN3_235B_A22B = {"num_hidden_layers": 94, "hidden_size": 4096, "num_attention_heads": 64,
                   "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
                   "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_experts": 128,
                   "num_experts_per_tok": 8, "tie_word_embeddings": False}

MODELS: dict[str, dict] = {"qwen3-8b": QWEN3_8B, "qwen3-235b-a22b": QWEN3_235B_A22B}


def get_model(name_or_path: str) -> ModelSpec:
    """A built-in name, an HF config.json path, or a checkpoint directory holding one."""
    key = name_or_path.lower()
    if key in MODELS:
        return from_hf_config(MODELS[key], name=key)
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" and path.exists():
        return from_hf_config(json.loads(path.read_text()), name=str(name_or_path))
    raise ValueError(f"unknown model {name_or_path!r}; expected one of {sorted(MODELS)} or a path "
                     "to an HF config.json (or a checkpoint directory containing one).")
