"""Owns the target model and its position-indexed KV cache; does all of the engine's tensor work. Each forward's
`AttentionMetadata` (slots, positions, lengths) is built here, once, and shared by every layer."""
from __future__ import annotations

import time

import torch
from torch.nn.utils.rnn import pad_sequence

from ..model import CausalLM, ModelOutput
from ..model.attention import AttentionMetadata
from .memory import kv_cache


class ModelRunner:
    def __init__(self, model: CausalLM, num_slots: int, max_len: int, hidden_layers: tuple[int, ...] = ()):
        self.model, self.num_slots, self.max_len, self.hidden_layers = model, num_slots, max_len, hidden_layers
        cfg = model.config
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.cache = kv_cache(cfg.num_layers, num_slots, cfg.num_kv_heads, max_len, cfg.head_dim, self.device,
                              self.dtype)

    @torch.inference_mode()
    def prefill(self, prompts: list[list[int]], slots: list[int], cache_only: bool = False) -> ModelOutput:
        """Right-padded batch of prompts, one slot each (pad positions write past the prompt, where the first
        decode step overwrites them unread). `cache_only`: write the KV cache only (a refill), no logits."""
        ids = pad_sequence([torch.tensor(p) for p in prompts], batch_first=True).to(self.device)  # [G, T]
        T = ids.shape[1]
        positions = torch.arange(T, device=self.device).expand(len(prompts), T)  # [G, T]
        last = torch.tensor([len(p) - 1 for p in prompts], device=self.device)[:, None]  # [G, 1]
        meta = AttentionMetadata.build(slots, positions)
        if cache_only:
            return self.model(ids, positions, self.cache, meta=meta, logits_index=last, compute_logits=False)
        full = -1 in self.hidden_layers  # a drafter reads every input's final hidden state
        out = self.model(ids, positions, self.cache, meta=meta, hidden_layers=self.hidden_layers,
                         logits_index=None if full else last)
        if full:  # logits of the last prompt token only
            out = out._replace(logits=out.logits.gather(1, last[..., None].expand(-1, -1, out.logits.shape[-1])))
        return out

    @torch.inference_mode()
    def copy_slot(self, src: int, dsts: list[int], length: int) -> None:
        """n samples of one prompt share its prefill: copy the prompt's cache rows to the siblings."""
        self.cache.copy_slot(src, dsts, length)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, slots: list[int]) -> ModelOutput:
        """tokens, positions: [B, T] -> logits [B, T, V]."""
        meta = AttentionMetadata.build(slots, positions)
        return self.model(tokens, positions, self.cache, meta=meta, hidden_layers=self.hidden_layers)

    @torch.inference_mode()
    def time_forward(self, batch: int, length: int, context: int = 0) -> float:
        """Seconds of one forward of `batch` rows x `length` tokens at positions context..context+length-1 (each
        query reads the `context` cached keys before it too), softmax included (the adaptive engine's warm-up
        profile). Only while no sequence holds a slot: it writes cache rows of slots 0..batch-1."""
        if context + length > self.max_len:
            raise ValueError(f"a forward at positions {context}..{context + length - 1} past max_len {self.max_len}")
        tokens = torch.zeros(batch, length, dtype=torch.long, device=self.device)  # [B, T]
        positions = torch.arange(context, context + length, device=self.device).expand(batch, length)  # [B, T]
        t = time.perf_counter()
        torch.softmax(self.forward(tokens, positions, list(range(batch))).logits.float(), dim=-1)  # [B, T, V]
        return time.perf_counter() - t

    @torch.no_grad()
    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Weight sync from a trainer: copy in place, so the cache and any captured graphs stay valid."""
        own = self.model.state_dict()
        for name, tensor in state_dict.items():
            if name not in own:
                raise KeyError(f"weight {name!r} is not a parameter of the engine's model")
            if own[name].data_ptr() != tensor.data_ptr():  # the same tensor when the engine shares the trainer's
                own[name].copy_(tensor)
