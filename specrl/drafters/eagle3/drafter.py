"""EAGLE-3 drafter: a one-layer head over fused target hidden states (see head.py).

The head's cache entry at position t holds (fused target features of t, embedding of token t+1), and its
output there predicts token t+2. `observe` writes the entries of every accepted position; `propose` feeds the
head's own output back in place of target features (training-time test), writing past the accepted prefix,
where the next `observe` overwrites them: a rejected draft needs no rollback.

With `sample_drafts` each draft is sampled from the head's distribution q under the row's own sampling
settings and q is returned, so a draft is accepted with prob sum_v min(p, q), which beats a point draft when
the policy is unsure; otherwise drafts are greedy (probs=None). The draft uniforms have their own
counter-based stream, so outputs stay a pure function of the seeds.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ...engine.drafting import Proposal, TargetForward
from ...engine.memory import kv_cache
from ...engine.sampler import STREAM_DRAFT, batch_params, hash_uniform, sample_from, target_probs
from ...engine.sequence import Sequence
from ...model.attention import AttentionMetadata
from ..weights import ModelDrafter
from .head import DEFAULT_INSTALL_HINT, Eagle3Head, load_head

class Eagle3Drafter(ModelDrafter):
    method = "eagle3"

    def __init__(self, head: Eagle3Head, target, num_slots: int, max_len: int, sample_drafts: bool = True):
        self.module = head
        self.target, self.sample_drafts = target, sample_drafts
        layers = head.config.target_hidden_layers
        self.hidden_layers = tuple(sorted(set(layers)))
        self._pick = [self.hidden_layers.index(i) for i in layers]  # the target returns layers in order
        p = next(head.parameters())
        cfg = head.config
        # one layer [S, Hkv, L, hd], in ordinary memory (huge pages allowed), kept between generate() calls
        self.kv = kv_cache(1, num_slots, cfg.num_kv_heads, max_len, cfg.head_dim, p.device, p.dtype, lazy=False)[0]
        self.last_h = torch.zeros(num_slots, cfg.hidden_size, device=p.device, dtype=p.dtype)  # [S, D] pre-norm
        self.last_pos = torch.zeros(num_slots, dtype=torch.long, device=p.device)  # [S]
        self.device = p.device

    @torch.inference_mode()
    def observe(self, fwd: TargetForward) -> None:
        B = len(fwd.seqs)
        slots = torch.tensor([s.slot for s in fwd.seqs], device=self.device)  # [B]
        meta = AttentionMetadata.build(slots, fwd.positions)
        fused = self.module.fuse([fwd.hidden[i] for i in self._pick])  # [B, T, D]
        out = self.module(fused, self.target.embed(fwd.next_tokens), fwd.positions, self.kv, meta)  # [B, T, D]
        rows = torch.arange(B, device=self.device)
        last = (fwd.valid - 1).clamp(min=0)  # [B]
        self.last_h[slots] = out[rows, last]
        self.last_pos[slots] = fwd.positions[rows, last]

    @torch.inference_mode()
    def propose(self, seqs: list[Sequence], k: list[int]) -> Proposal:
        B, K = len(seqs), max(k, default=0)
        lengths = torch.tensor(k, dtype=torch.long, device=self.device)  # [B]
        if K == 0:
            return Proposal(torch.zeros(B, 0, dtype=torch.long, device=self.device), lengths, None)
        slots = torch.tensor([s.slot for s in seqs], device=self.device)  # [B]
        h = self.last_h[slots][:, None]  # [B, 1, D]
        pos = self.last_pos[slots][:, None]  # [B, 1]
        params = batch_params(seqs, self.device) if self.sample_drafts else None
        if params is not None:  # every step's uniforms in one call
            steps = torch.arange(K, device=self.device)[None]  # [1, K]
            u = hash_uniform(params[3], pos + 2 + steps, STREAM_DRAFT)  # [B, K]
        drafts, qs = [], []
        for j in range(K):  # one head forward per draft step for the whole batch
            logits = self.module.full_logits(h, self.target)  # [B, 1, V], -inf outside a draft vocabulary
            if params is None:
                tok = logits.argmax(-1)  # [B, 1]
            else:  # q = the head's distribution under each row's own temperature/top-k/top-p
                q = target_probs(logits, *params[:3])  # [B, 1, V]
                tok = sample_from(q, u[:, j:j + 1])  # [B, 1]
                qs.append(q)
            drafts.append(tok)
            if j + 1 < K:
                at = pos + 1 + j  # [B, 1]
                h = self.module(h, self.target.embed(tok), at, self.kv, AttentionMetadata.build(slots, at))  # [B, 1, D]
        return Proposal(torch.cat(drafts, dim=1), lengths, torch.cat(qs, dim=1) if qs else None)  # [B, K], [B, K, V]


def check_compatible(head: Eagle3Head, target_cfg, source: str) -> None:
    """The head was made for a policy of this vocabulary, width and depth (`target_cfg`: its ModelConfig)."""
    hc, tc = head.config, target_cfg
    for key in ("vocab_size", "hidden_size"):
        if getattr(hc, key) != getattr(tc, key):
            raise ValueError(f"EAGLE-3 head {source!r} has {key} {getattr(hc, key)} but the policy has "
                             f"{getattr(tc, key)}: the head reuses the policy's embeddings and lm_head, so train "
                             f"one for this policy ({DEFAULT_INSTALL_HINT} with --model PATH)")
    bad = [i for i in hc.target_hidden_layers if not 0 <= i < tc.num_layers]
    if bad:
        raise ValueError(f"EAGLE-3 head {source!r} reads target layers {bad}, but the policy has layers "
                         f"0..{tc.num_layers - 1}: train a head for this policy ({DEFAULT_INSTALL_HINT})")


def load_drafter(path: Path, default: bool, target, num_slots: int, max_len: int) -> Eagle3Drafter:
    """The head saved at `path` (`default`: the embedded one), in the target's device and dtype, checked."""
    if not (path / "config.json").is_file():
        which = "the embedded default EAGLE-3 head" if default else "EAGLE-3 head"
        raise FileNotFoundError(f"{which} is missing: no config.json in {str(path)!r}. Pass "
                                f"SpecConfig(draft_model=DIR) or {DEFAULT_INSTALL_HINT} "
                                "(`--out DIR`, then draft_model=DIR)")
    p = next(target.parameters())
    head = load_head(path, device=p.device, dtype=p.dtype)
    check_compatible(head, target.config, str(path))
    return Eagle3Drafter(head, target, num_slots, max_len)
