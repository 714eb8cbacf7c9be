"""Draft-model drafter: a small `CausalLM` with the policy's tokenizer drafts greedily (q = one-hot).

It keeps its own position-indexed KV cache per slot and, per slot, how many leading positions of that
cache hold tokens that are still in the sequence (`cached`). `observe` only moves that count back to the
accepted prefix; rejected entries are simply overwritten by the next `propose`, as in the target's cache.
`propose` first feeds every token not cached yet (the accepted drafts and the correction token, or the
whole prompt of a new sequence) in one right-padded forward, then runs one batched forward per draft.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch.nn.utils.rnn import pad_sequence

from ...engine.drafting import Proposal, TargetForward, greedy_proposal
from ...engine.memory import kv_cache
from ...engine.sequence import Sequence
from ..weights import ModelDrafter
from ...model import CausalLM, load_model, load_tokenizer

def check_same_vocab(target: CausalLM, draft: CausalLM, draft_path: str) -> None:
    """The draft must speak the policy's token ids: same vocab size and, when both ship one, same tokenizer."""
    target_path = target.source_path or "<in-memory policy>"
    tv, dv = target.config.vocab_size, draft.config.vocab_size
    if tv != dv:
        raise ValueError(f"draft model {draft_path!r} has vocab_size {dv} but the policy {target_path!r} has {tv}: "
                         "a draft model must use the policy's tokenizer. Train one with "
                         "`specrl train-drafter --method draft_model --model POLICY`.")
    t_tok = load_tokenizer(target_path) if target.source_path else None
    d_tok = load_tokenizer(draft_path)
    if t_tok is not None and d_tok is not None and t_tok.get_vocab(True) != d_tok.get_vocab(True):
        raise ValueError(f"the tokenizer of draft model {draft_path!r} differs from the policy's tokenizer in "
                         f"{target_path!r} (same size {tv}, different token ids): use a draft model trained "
                         "with the policy's tokenizer.")


class DraftModelDrafter(ModelDrafter):
    method = "draft_model"
    hidden_layers: tuple[int, ...] = ()

    def __init__(self, draft: CausalLM, num_slots: int, max_len: int):
        self.module = draft.eval()
        cfg = draft.config
        p = next(draft.parameters())
        self.device = p.device
        # positions up to max_len + MAX_SPEC_TOKENS; one more row at the end is scratch for padding
        self.cache = kv_cache(cfg.num_layers, num_slots, cfg.num_kv_heads, max_len, cfg.head_dim, p.device, p.dtype,
                              spare=1)
        self.scratch = self.cache[0][0].shape[2] - 1
        self.cached = [0] * num_slots  # leading cache positions per slot that match the sequence

    def observe(self, fwd: TargetForward) -> None:
        starts, valid = fwd.positions[:, 0].tolist(), fwd.valid.tolist()
        for s, start, n in zip(fwd.seqs, starts, valid):
            # prefill starts a sequence (a reused slot holds a stale count); verify keeps the accepted inputs
            self.cached[s.slot] = 0 if start == 0 else min(self.cached[s.slot], start + n)

    @torch.inference_mode()
    def propose(self, seqs: list[Sequence], k: list[int]) -> Proposal:
        out = greedy_proposal(seqs, k, self.device, lambda slots, K: self._drafts(seqs, slots, K))
        if out.tokens.shape[1]:
            for s, kj in zip(seqs, k):
                self.cached[s.slot] = s.num_tokens + max(kj - 1, 0)
        return out

    def _drafts(self, seqs: list[Sequence], slots: torch.Tensor, K: int):
        # step 1: feed what the cache lacks; its last logits give the first draft
        tok = self._catch_up(seqs, slots)  # [B]
        pos = torch.tensor([s.num_tokens for s in seqs], device=self.device)  # [B] position of draft 1
        # step 2: one forward per further draft, feeding the previous draft
        for j in range(K):
            yield tok
            if j + 1 < K:
                logits = self.module(tok[:, None], (pos + j)[:, None], self.cache, slots).logits  # [B, 1, V]
                tok = logits[:, -1].argmax(-1)

    def _catch_up(self, seqs: list[Sequence], slots: torch.Tensor) -> torch.Tensor:
        """Feeds tokens[cached:] of every row, right-padded; returns each row's greedy next token [B]."""
        news = [s.tokens[min(self.cached[s.slot], s.num_tokens - 1):] for s in seqs]
        starts = [s.num_tokens - len(t) for s, t in zip(seqs, news)]
        ids = pad_sequence([torch.tensor(t) for t in news], batch_first=True)  # [B, T]
        # pads continue past the row's tokens, where drafting overwrites them before any read; the rare
        # pad that would leave the cache goes to the scratch row
        positions = (torch.tensor(starts)[:, None] + torch.arange(ids.shape[1])).clamp_max(self.scratch)  # [B, T]
        last = torch.tensor([len(t) - 1 for t in news], device=self.device)[:, None]  # [B, 1]
        out = self.module(ids.to(self.device), positions.to(self.device), self.cache, slots, logits_index=last)
        return out.logits[:, -1].argmax(-1)  # [B]

    def release(self, seq: Sequence) -> None:
        self.cached[seq.slot] = 0

    def caches(self) -> list:
        return self.cache

    def refit(self) -> None:
        """Its cache holds the old weights' keys of the sequence's own tokens: re-prefilled at the next propose."""
        self.cached = [0] * len(self.cached)


def load_drafter(path: Path, target: CausalLM, num_slots: int, max_len: int) -> DraftModelDrafter:
    """The draft model checkpointed at `path`, in the target's device and dtype, checked against its tokenizer."""
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"no draft model checkpoint at {str(path)!r} (expected config.json and *.safetensors): set "
            "SpecConfig.draft_model to a small CausalLM with the policy's tokenizer, or train one with "
            "`specrl train-drafter --method draft_model --model POLICY --out DIR`.")
    p = next(target.parameters())
    draft = load_model(path, device=p.device, dtype=p.dtype)
    check_same_vocab(target, draft, str(path))
    return DraftModelDrafter(draft, num_slots, max_len)
