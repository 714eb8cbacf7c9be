"""The EAGLE-3 head (Li et al. 2025) as an nn.Module, and its checkpoint format.

The head fuses three target hidden-state layers (low, middle, high) through `fc` (3D -> D), runs one decoder
layer whose attention reads concat(RMSNorm(embed(token)), RMSNorm(hidden)) (width 2D), then a final RMSNorm.
It reuses the target's embeddings and lm_head, so it stores neither. The pre-norm output is the next draft
step's hidden (training-time test). Checkpoint: one `model.safetensors` under the key names vLLM, SGLang and
SpecForge load; `load_head` reads the public layouts back too (docs/drafter_export.md).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from ...io import atomic_dir
from ...model import ModelConfig
from ...model.checkpoint import load_safetensors
from ...model.attention import AttentionMetadata, LayerKV, cached_attention
from ...model.layers import MLP, Attention, RMSNorm, apply_rope, rope_cos_sin

DEFAULT_INSTALL_HINT = "run `specrl train-drafter --method eagle3` to train one"
PUBLIC_ARCHS = {"LlamaForCausalLMEagle3", "Eagle3Speculator"}  # export.py's two layouts


def default_layers(num_layers: int) -> tuple[int, int, int]:
    """NeMo-RL/vLLM default (1, L/2-1, L-4), pushed up to be increasing and clamped into [0, L-1] for
    small L: L=36 gives (1, 17, 32), L=6 gives (1, 2, 3), L=2 gives (1, 1, 1). From L=5 up it never takes
    the last layer, which SGLang cannot capture (export.py's check_servable)."""
    out: list[int] = []
    for want in (1, num_layers // 2 - 1, num_layers - 4):
        layer = max(want, out[-1] + 1) if out else want
        out.append(max(0, min(layer, num_layers - 1)))
    return tuple(out)


def vllm_layer_ids(layers) -> list[int]:
    """vLLM numbers a captured hidden state by the layer it is the input of: output of layer i = id i + 1
    (`LlamaModel.forward` appends `hidden_states + residual` before running layer `idx`)."""
    return [int(i) + 1 for i in layers]


@dataclass
class Eagle3Config:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    target_hidden_layers: tuple[int, ...]
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    draft_vocab_size: int | None = None  # None: draft over the target's vocabulary with the target's lm_head

    def __post_init__(self):
        self.target_hidden_layers = tuple(int(i) for i in self.target_hidden_layers)
        if len(self.target_hidden_layers) != 3:
            raise ValueError(f"target_hidden_layers={list(self.target_hidden_layers)}: EAGLE-3 fuses exactly 3 "
                             "target layers (low, mid, high), e.g. [1, 2, 3]")
        if self.draft_vocab_size is not None and not 1 <= self.draft_vocab_size <= self.vocab_size:
            raise ValueError(f"draft_vocab_size={self.draft_vocab_size}: expected 1..vocab_size ({self.vocab_size}) "
                             "or None for the full vocabulary")

    @classmethod
    def for_target(cls, target: ModelConfig, layers: tuple[int, ...] | None = None,
                   intermediate_size: int | None = None) -> "Eagle3Config":
        return cls(target.vocab_size, target.hidden_size, intermediate_size or target.intermediate_size,
                   target.num_heads, target.num_kv_heads, target.head_dim,
                   layers if layers is not None else default_layers(target.num_layers),
                   target.rms_norm_eps, target.rope_theta)

    def to_hf(self) -> dict:
        return {"architectures": ["Eagle3Head"], "model_type": "eagle3", "num_hidden_layers": 1,
                "target_hidden_layers": list(self.target_hidden_layers), "vocab_size": self.vocab_size,
                "hidden_size": self.hidden_size, "target_hidden_size": self.hidden_size,
                "intermediate_size": self.intermediate_size, "num_attention_heads": self.num_heads,
                "num_key_value_heads": self.num_kv_heads, "head_dim": self.head_dim,
                "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta,
                "eagle_aux_hidden_state_layer_ids": vllm_layer_ids(self.target_hidden_layers),
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(self.target_hidden_layers)},
                **({"draft_vocab_size": self.draft_vocab_size} if self.draft_vocab_size is not None else {})}

    @classmethod
    def from_hf(cls, hf: dict) -> "Eagle3Config":
        """Reads our own `Eagle3Head` config or a public one: `LlamaForCausalLMEagle3` or `Eagle3Speculator`
        (export.py)."""
        archs = hf.get("architectures", [])
        if not set(archs) & {"Eagle3Head", *PUBLIC_ARCHS}:
            raise ValueError(f"config.json architectures={archs}: expected ['Eagle3Head'] (an EAGLE-3 head written "
                             f"by specrl) or one of {sorted(PUBLIC_ARCHS)} (`specrl export-drafter`); "
                             f"{DEFAULT_INSTALL_HINT}")
        if "Eagle3Speculator" in archs:
            if hf.get("norm_before_residual", True):  # the speculators format's default
                raise ValueError("this speculators checkpoint has norm_before_residual true (or unset, which means "
                                 "true): specrl's head takes the residual before hidden_norm; export it with "
                                 "norm_before_residual false")
            hf = {**hf["transformer_layer_config"], **{k: v for k, v in hf.items() if k != "architectures"}}
        dvs = hf.get("draft_vocab_size")
        if "Eagle3Head" not in archs:  # the public layouts always carry their own lm_head (vLLM's default: V)
            dvs = dvs or hf["vocab_size"]
        head_dim = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
        return cls(hf["vocab_size"], hf["hidden_size"], hf["intermediate_size"], hf["num_attention_heads"],
                   hf["num_key_value_heads"], head_dim, layers_from_hf(hf), hf.get("rms_norm_eps", 1e-6),
                   hf.get("rope_theta", 10000.0), dvs)


def layers_from_hf(hf: dict) -> tuple[int, ...]:
    """Fused layers as layer outputs, from the first key present: specrl's `target_hidden_layers`, vLLM's
    top-level ids (inputs: minus 1), SGLang/SpecForge's `eagle_config` ids (outputs already)."""
    if "target_hidden_layers" in hf:
        return tuple(hf["target_hidden_layers"])
    if hf.get("eagle_aux_hidden_state_layer_ids"):
        return tuple(i - 1 for i in hf["eagle_aux_hidden_state_layer_ids"])
    nested = (hf.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if not nested:
        raise ValueError("config.json names no fused target layers (target_hidden_layers, "
                         "eagle_aux_hidden_state_layer_ids or eagle_config.eagle_aux_hidden_state_layer_ids): "
                         "write them, or re-export the head with `specrl export-drafter`")
    return tuple(nested)


class Eagle3Layer(nn.Module):
    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        # the shared Attention/MLP blocks, Llama style (no qkv bias or q/k norm) as in the published EAGLE-3 heads
        lc = ModelConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_layers=1, arch="llama",
                         intermediate_size=cfg.intermediate_size, num_heads=cfg.num_heads,
                         num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim, rope_theta=cfg.rope_theta,
                         rms_norm_eps=cfg.rms_norm_eps)
        D, hd = cfg.hidden_size, cfg.head_dim
        self.self_attn = Attention(lc)
        # attention reads [embedding; hidden], width 2D
        self.self_attn.q_proj = nn.Linear(2 * D, cfg.num_heads * hd, bias=False)
        self.self_attn.k_proj = nn.Linear(2 * D, cfg.num_kv_heads * hd, bias=False)
        self.self_attn.v_proj = nn.Linear(2 * D, cfg.num_kv_heads * hd, bias=False)
        self.mlp = MLP(lc)
        self.hidden_norm = RMSNorm(D, cfg.rms_norm_eps)
        self.input_layernorm = RMSNorm(D, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(D, cfg.rms_norm_eps)


class Eagle3Head(nn.Module):
    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        self.config = cfg
        self.fc = nn.Linear(3 * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.midlayer = Eagle3Layer(cfg)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = None  # own output layer over a draft vocabulary; None: the target's lm_head
        if cfg.draft_vocab_size is not None:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
            # the public convention: target id = draft id + d2t[draft id]
            self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))

    @property
    def target_ids(self) -> torch.Tensor | None:
        """Target id of each draft id [Vd], or None when the head drafts over the whole target vocabulary."""
        if self.lm_head is None:
            return None
        return torch.arange(len(self.d2t), device=self.d2t.device) + self.d2t

    @property
    def draft_id_of(self) -> torch.Tensor | None:
        """The inverse of `target_ids`: the draft id of each target id [V], -1 outside the draft vocabulary."""
        if self.lm_head is None:
            return None
        index = torch.full((self.config.vocab_size,), -1, dtype=torch.long, device=self.d2t.device)  # [V]
        return index.index_copy(0, self.target_ids, torch.arange(len(self.d2t), device=self.d2t.device))

    def draft_logits(self, h: torch.Tensor, target) -> torch.Tensor:
        """Pre-norm output h [B, T, D] -> logits over the draft vocabulary [B, T, Vd] (Vd = V without one)."""
        x = self.norm(h)
        return target.lm_head_logits(x) if self.lm_head is None else self.lm_head(x)

    def full_logits(self, h: torch.Tensor, target) -> torch.Tensor:
        """Logits over the target vocabulary [B, T, V]: -inf outside the draft vocabulary, so q is 0 there
        and verification stays exact."""
        small = self.draft_logits(h, target)  # [B, T, Vd]
        if self.lm_head is None:
            return small
        full = small.new_full((*small.shape[:-1], self.config.vocab_size), float("-inf"))  # [B, T, V]
        return full.index_copy(-1, self.target_ids, small)

    def fuse(self, hidden: list[torch.Tensor]) -> torch.Tensor:
        """Three target layers' outputs, each [B, T, D] -> fused feature [B, T, D]."""
        return self.fc(torch.cat(hidden, dim=-1))

    def qkv(self, h: torch.Tensor, emb: torch.Tensor, positions: torch.Tensor):
        """h, emb: [B, T, D]; positions: [B, T] -> q [B, H, T, hd], k, v [B, Hkv, T, hd] (rope applied)."""
        layer, attn = self.midlayer, self.midlayer.self_attn
        x = torch.cat([layer.input_layernorm(emb), layer.hidden_norm(h)], dim=-1)  # [B, T, 2D]
        B, T, _ = x.shape
        q = attn.q_proj(x).view(B, T, attn.num_heads, attn.head_dim).transpose(1, 2)  # [B, H, T, hd]
        k = attn.k_proj(x).view(B, T, attn.num_kv_heads, attn.head_dim).transpose(1, 2)  # [B, Hkv, T, hd]
        v = attn.v_proj(x).view(B, T, attn.num_kv_heads, attn.head_dim).transpose(1, 2)
        cos, sin = rope_cos_sin(positions, attn.head_dim, attn.rope_theta, q.dtype)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def finish(self, h: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        """Residual from the un-normed hidden h [B, T, D]; attn_out [B, H, T, hd] -> pre-norm output [B, T, D]."""
        layer = self.midlayer
        B, _, T, _ = attn_out.shape
        x = h + layer.self_attn.o_proj(attn_out.transpose(1, 2).reshape(B, T, -1))  # [B, T, D]
        return x + layer.mlp(layer.post_attention_layernorm(x))

    def forward(self, h, emb, positions, kv: LayerKV, meta: AttentionMetadata) -> torch.Tensor:
        """One step over a position-indexed cache (k, v each [S, Hkv, L, hd]) under `meta` (whose positions
        are `positions` [B, T]) -> pre-norm output [B, T, D]."""
        q, k, v = self.qkv(h, emb, positions)
        return self.finish(h, cached_attention(q, k, v, kv, meta, self.midlayer.self_attn.scale))


def init_head(cfg: Eagle3Config, seed: int = 0, std: float = 0.02) -> Eagle3Head:
    """A fresh head: normal(0, std) matrices, unit norm gains. Deterministic in `seed`."""
    gen = torch.Generator().manual_seed(seed)
    head = Eagle3Head(cfg)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen) * std)
            else:
                p.fill_(1.0)
    return head


def save_head(head: Eagle3Head, path: str | Path, dtype: torch.dtype | None = None) -> Path:
    """Writes config.json + model.safetensors atomically (`dtype`, e.g. bf16, to ship small)."""
    state = {k: v.detach().to("cpu", (dtype or v.dtype) if v.is_floating_point() else v.dtype).contiguous()
             for k, v in head.state_dict().items()}
    hf = head.config.to_hf()
    hf["torch_dtype"] = str(state["fc.weight"].dtype).removeprefix("torch.")  # not d2t's int64
    return write_head_dir(path, hf, state)


def write_head_dir(path: str | Path, hf: dict, tensors: dict[str, torch.Tensor]) -> Path:
    """config.json + model.safetensors, atomically: specrl's own layout and export.py's public ones."""
    with atomic_dir(path) as tmp:
        (tmp / "config.json").write_text(json.dumps(hf, indent=2) + "\n")
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    return Path(path)


def load_head(path: str | Path, device="cpu", dtype: torch.dtype | None = torch.float32) -> Eagle3Head:
    """The head at `path` in `dtype` (None: the dtype its weights are stored in)."""
    path = Path(path)
    if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"no EAGLE-3 head at {str(path)!r}: expected config.json and model.safetensors; "
                                f"{DEFAULT_INSTALL_HINT}")
    cfg = Eagle3Config.from_hf(json.loads((path / "config.json").read_text()))
    head = Eagle3Head(cfg)
    # t2d is rebuilt from d2t; the speculators format names the decoder layer `layers.0.` (vLLM's name too)
    state = {k.replace("layers.0.", "midlayer.", 1) if k.startswith("layers.0.") else k: v
             for k, v in load_safetensors(path / "model.safetensors").items() if k != "t2d"}
    missing, unexpected = head.load_state_dict(state, strict=False)
    if cfg.draft_vocab_size == cfg.vocab_size:  # a full-vocabulary export has no d2t: the identity (zeros)
        missing = [k for k in missing if k != "d2t"]
    if missing or unexpected:
        raise ValueError(f"EAGLE-3 checkpoint {str(path)!r} does not match its config: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
    return head.to(device=device, dtype=dtype or state["fc.weight"].dtype).eval()
