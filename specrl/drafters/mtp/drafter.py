"""MTP drafter: chains the policy's multi-token-prediction modules (DeepSeek-V3), greedy, q = one-hot.

Draft j comes from module j (the last one for j > D), which combines h^{j-1} with the embedding of the
previous token. Every depth runs at the position of the last token the target has seen, and each module
keeps a KV cache over positions: `observe` fills verified positions teacher-forced, `propose` overwrites
the last one with drafts. Deeper modules' KV is therefore approximate; exactness never depends on it.

The modules come from, in order: `SpecConfig.draft_model` (an MTP-only directory or a full checkpoint with
`mtp.*` weights), the policy's own `mtp`, and the embedded default when its shapes fit.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from ...engine.drafting import Proposal, TargetForward, greedy_proposal
from ...engine.memory import kv_cache
from ...engine.sequence import Sequence
from ..weights import ModelDrafter
from ...io import atomic_dir
from ...model import CausalLM, ModelConfig, resolve_dtype
from ...model.attention import AttentionMetadata
from ...model.checkpoint import read_state_dict
from ...model.mtp import MTPStack

MATCH_KEYS = ("vocab_size", "hidden_size")  # what h^0, the embedding and the lm_head share with the policy


def save_mtp_only(stack: MTPStack, cfg: ModelConfig, path: str | Path, dtype=None) -> Path:
    """Writes config.json (the policy's config with num_nextn_predict_layers) and mtp.safetensors."""
    state = {f"mtp.{k}": v.detach().to("cpu", resolve_dtype(dtype) if dtype else v.dtype).contiguous()
             for k, v in stack.state_dict().items()}
    hf = replace(cfg, num_mtp_modules=stack.depth).to_hf()
    with atomic_dir(path) as tmp:
        (tmp / "config.json").write_text(json.dumps(hf, indent=2))
        save_file(state, str(tmp / "mtp.safetensors"), metadata={"format": "pt"})
    return Path(path)


def load_mtp(path: str | Path, target: CausalLM) -> MTPStack:
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no MTP checkpoint at {str(path)!r} (expected config.json and *.safetensors "
                                "with mtp.* weights): train one with `specrl train-drafter --method mtp`.")
    cfg = ModelConfig.from_hf(json.loads((path / "config.json").read_text()))
    if cfg.num_mtp_modules < 1:
        raise ValueError(f"{str(path)!r} has no MTP modules (num_nextn_predict_layers missing or 0): train them "
                         "with `specrl train-drafter --method mtp --model POLICY --out DIR`.")
    bad = {k: (getattr(cfg, k), getattr(target.config, k)) for k in MATCH_KEYS
           if getattr(cfg, k) != getattr(target.config, k)}
    if bad:
        raise ValueError(f"MTP modules in {str(path)!r} do not fit the policy: (theirs, policy's) = {bad}; "
                         "train MTP modules for this policy with `specrl train-drafter --method mtp`.")
    state = {k.removeprefix("mtp."): v for k, v in read_state_dict(path).items() if k.startswith("mtp.")}
    p = next(target.parameters())
    stack = MTPStack(cfg)
    stack.load_state_dict(state, strict=True)
    return stack.to(device=p.device, dtype=p.dtype).eval()


def _default_fits(shipped: Path, target: CausalLM) -> bool:
    cfg_file = shipped / "config.json"
    if not cfg_file.is_file():
        return False
    shipped = ModelConfig.from_hf(json.loads(cfg_file.read_text()))
    return replace(shipped, num_mtp_modules=0) == replace(target.config, num_mtp_modules=0)


class MTPDrafter(ModelDrafter):
    method = "mtp"
    hidden_layers: tuple[int, ...] = (-1,)

    def __init__(self, target: CausalLM, stack: MTPStack, num_slots: int, max_len: int):
        self.target, self.module = target, stack
        p = next(target.parameters())
        self.device = p.device
        attn = stack.layers[0].block.self_attn
        self.cache = kv_cache(stack.depth, num_slots, attn.num_kv_heads, max_len, attn.head_dim, p.device, p.dtype)
        self.h0 = torch.zeros(num_slots, target.config.hidden_size, device=p.device, dtype=p.dtype)  # [S, D] at p

    @torch.inference_mode()
    def observe(self, fwd: TargetForward) -> None:
        slots = torch.tensor([s.slot for s in fwd.seqs], device=self.device)  # [B]
        meta = AttentionMetadata.build(slots, fwd.positions)  # every depth runs at the target's positions
        h = fwd.last_hidden  # [B, T, D]
        for d in range(1, self.module.depth + 1):
            ids = F.pad(fwd.next_tokens[:, d - 1:], (0, d - 1))  # [B, T]: t_{i+d}, zeros past the row
            h = self.module.step(d, h, self.target.embed(ids), fwd.positions, self.cache[d - 1], meta)
        last = (fwd.valid - 1).clamp_min(0)  # [B] index of the last accepted input
        self.h0[slots] = fwd.last_hidden[torch.arange(len(fwd.seqs), device=self.device), last]  # [B, D]

    @torch.inference_mode()
    def propose(self, seqs: list[Sequence], k: list[int]) -> Proposal:
        return greedy_proposal(seqs, k, self.device, lambda slots, K: self._drafts(seqs, slots, K))

    def _drafts(self, seqs: list[Sequence], slots: torch.Tensor, K: int):
        pos = torch.tensor([[s.num_tokens - 2] for s in seqs], device=self.device)  # [B, 1] last verified input
        tok = torch.tensor([s.tokens[-1] for s in seqs], device=self.device)  # [B]
        h = self.h0[slots][:, None]  # [B, 1, D]
        meta = AttentionMetadata.build(slots, pos)  # every draft runs at the last verified position
        for j in range(1, K + 1):
            d = min(j, self.module.depth)
            h = self.module.step(j, h, self.target.embed(tok[:, None]), pos, self.cache[d - 1], meta)  # [B, 1, D]
            tok = self.module.logits(j, h, self.target.lm_head)[:, -1].argmax(-1)  # [B]
            yield tok

    def caches(self) -> list:
        return self.cache


def load_drafter(draft_model: str | None, shipped: Path, target: CausalLM, num_slots: int, max_len: int) -> MTPDrafter:
    """The modules from `draft_model`, else the policy's own, else the shipped ones in `shipped` when they fit."""
    if draft_model:
        stack = load_mtp(draft_model, target)
    elif target.mtp is not None:
        stack = target.mtp
    elif _default_fits(shipped, target):
        stack = load_mtp(shipped, target)
    else:
        where = target.source_path or "<in-memory policy>"
        raise ValueError(
            f"method 'mtp' needs MTP modules, but the policy {where!r} has none (num_nextn_predict_layers = 0) "
            "and SpecConfig.draft_model is not set. Train them with `specrl train-drafter --method mtp --model "
            "POLICY --out DIR`, then load DIR as the policy or pass SpecConfig(method='mtp', draft_model=DIR).")
    return MTPDrafter(target, stack, num_slots, max_len)
