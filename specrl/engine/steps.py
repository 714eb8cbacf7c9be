"""The engine's kinds of step, as tensor work over a list of running sequences: a speculative step is draft ->
verify -> advance, a decode step its verify with no drafts, and a prefill samples its first tokens with the same
tail (`sampler.sample`). Each draws with `hash_uniform(seed, absolute position, stream)`, so a token does not
depend on how the step was batched, and returns a `StepResult`, touching no counters.
"""
from __future__ import annotations

import time

import torch
from torch.nn.utils.rnn import pad_sequence

from ..model import ModelOutput
from .drafting import Drafter, Plan, Proposal, TargetForward, on_device
from .runner import ModelRunner
from .sampler import Sampled, sample
from .sequence import Sequence, StepResult


def append(seqs: list[Sequence], s: Sampled) -> list[int]:
    """Each sequence takes its accepted drafts + 1, cut at a stop token/string or its budget; returns how many."""
    n_acc, toks, lps = s.verdict.num_accepted.tolist(), s.verdict.tokens.tolist(), s.logprobs.tolist()
    return [seq.append(toks[b][:n_acc[b] + 1], lps[b][:n_acc[b] + 1], s.tops[b][:n_acc[b] + 1] if s.tops else None)
            for b, seq in enumerate(seqs)]


def prefill_step(runner: ModelRunner, groups: list[list[Sequence]], drafter: Drafter | None) -> StepResult:
    # step 1: one forward per distinct prompt; siblings get a copy of its cache rows
    out = runner.prefill([g[0].prompt for g in groups], [g[0].slot for g in groups])
    for g in groups:
        runner.copy_slot(g[0].slot, [s.slot for s in g[1:]], len(g[0].prompt))
    seqs = [s for g in groups for s in g]
    rep = torch.tensor([i for i, g in enumerate(groups) for _ in g], device=runner.device)  # [N]
    # step 2: each sample draws its first token with its own seed
    append(seqs, sample(out.logits[rep], seqs, torch.tensor([len(s.prompt) for s in seqs], device=runner.device)))
    # step 3: the drafter sees the prompt's hidden states, each input paired with the token after it
    if drafter is not None:
        next_tokens = pad_sequence([torch.tensor(s.prompt[1:] + s.output[:1]) for s in seqs],
                                   batch_first=True)  # [N, T]
        T = next_tokens.shape[1]
        drafter.observe(TargetForward(
            seqs, torch.arange(T, device=runner.device).expand(len(seqs), T), next_tokens.to(runner.device),
            torch.tensor([len(s.prompt) for s in seqs], device=runner.device),
            tuple(h[rep] for h in out.hidden), out.last_hidden[rep]))
    return StepResult("prefill", seqs, tokens_in=sum(len(g[0].prompt) for g in groups), emitted_tokens=len(seqs))


def decode_step(runner: ModelRunner, seqs: list[Sequence]) -> StepResult:
    """SD off: the verify of a proposal with no drafts."""
    none = Proposal(torch.zeros(len(seqs), 0, dtype=torch.long, device=runner.device), None, None)
    append(seqs, verify_step(runner, seqs, none)[2])
    return StepResult("decode", seqs, tokens_in=len(seqs), emitted_tokens=len(seqs))


def draft(drafters: dict[str, Drafter], seqs: list[Sequence], plan: Plan, vocab: int, device) -> tuple[Proposal, dict]:
    """One [B, K] proposal from each drafter over its rows of the (capped) plan, and each drafter's seconds."""
    parts, draft_s_by = [], {}
    for name in dict.fromkeys(w for w, ki in zip(plan.drafters, plan.k) if w is not None and ki > 0):
        rows = [b for b, w in enumerate(plan.drafters) if w == name and plan.k[b] > 0]
        t = time.perf_counter()
        if name in plan.ready:
            prop = cut(on_device(plan.ready[name], device), rows, [plan.k[b] for b in rows])
        else:
            prop = on_device(drafters[name].propose([seqs[b] for b in rows], [plan.k[b] for b in rows]), device)
        parts.append((rows, prop))
        draft_s_by[name] = time.perf_counter() - t
    if len(parts) == 1 and len(parts[0][0]) == len(seqs):
        return parts[0][1], draft_s_by
    return merge_proposals(parts, len(seqs), vocab, device), draft_s_by


def merge_proposals(parts: list[tuple[list[int], Proposal]], B: int, vocab: int, device) -> Proposal:
    """One [B, K] proposal from (rows, proposal) parts over disjoint rows; when any part carries q, the point
    drafts of the others become one-hot rows of q. Rows no part covers draft nothing."""
    K = max((p.tokens.shape[1] for _, p in parts), default=0)
    tokens = torch.zeros(B, K, dtype=torch.long, device=device)
    lengths = torch.zeros(B, dtype=torch.long, device=device)
    with_q = any(p.probs is not None for _, p in parts)
    probs = torch.zeros(B, K, vocab, device=device) if with_q and K > 0 else None
    for rows, p in parts:
        idx = torch.tensor(rows, dtype=torch.long, device=device)
        Kp = p.tokens.shape[1]
        tokens[idx, :Kp] = p.tokens
        lengths[idx] = p.lengths
        if probs is not None and Kp > 0:
            if p.probs is not None:  # unmasked: sample() masks the merged q by the merged lengths once
                probs[idx, :Kp] = p.probs.float()
            else:
                one_hot = torch.zeros(len(rows), Kp, vocab, device=device)  # [R, Kp, V] point drafts
                probs[idx, :Kp] = one_hot.scatter_(-1, p.tokens[..., None], 1.0)
    return Proposal(tokens, lengths, probs)


def cut(prop: Proposal, rows: list[int], k: list[int]) -> Proposal:
    """Rows `rows` of a proposal made over every running sequence, each cut to its k (a draft's prefix is a draft)."""
    idx = torch.tensor(rows, dtype=torch.long, device=prop.tokens.device)
    K = min(max(k, default=0), prop.tokens.shape[1])
    lengths = torch.minimum(prop.lengths[idx], torch.tensor(k, dtype=torch.long, device=idx.device))
    return Proposal(prop.tokens[idx, :K], lengths, None if prop.probs is None else prop.probs[idx, :K])


def verify_step(runner: ModelRunner, seqs: list[Sequence], prop: Proposal) -> tuple[ModelOutput, torch.Tensor, Sampled]:
    """One forward over [last token, drafts...] of every sequence, and the sampling tail on it."""
    K = prop.tokens.shape[1]
    last = torch.tensor([[s.tokens[-1]] for s in seqs], device=runner.device)  # [B, 1]
    start = torch.tensor([s.num_tokens for s in seqs], device=runner.device)  # [B] position of the first new token
    positions = (start - 1)[:, None] + torch.arange(K + 1, device=runner.device)  # [B, K+1]
    out = runner.forward(torch.cat([last, prop.tokens], dim=1), positions, [s.slot for s in seqs])
    return out, positions, sample(out.logits, seqs, start, prop)


def advance(observer: Drafter, seqs: list[Sequence], plan: Plan, prop: Proposal, out: ModelOutput,
            positions: torch.Tensor, sampled: Sampled) -> StepResult:
    """Each sequence appends what the verdict kept; every drafter of `observer` sees the forward."""
    kept = append(seqs, sampled)
    observer.observe(TargetForward(seqs, positions, sampled.verdict.tokens, torch.tensor(kept, device=positions.device),
                                   out.hidden, out.last_hidden))
    lengths, n_acc = prop.lengths.tolist(), sampled.verdict.num_accepted.tolist()
    return StepResult("spec", seqs, tokens_in=positions.numel(), emitted_tokens=sum(kept), k=max(plan.k, default=0),
                      draft_tokens=sum(lengths), accepted_tokens=sum(n_acc),
                      drafters=[w if n > 0 else None for w, n in zip(plan.drafters, lengths)],
                      drafters_asked=[w if ki > 0 else None for w, ki in zip(plan.drafters, plan.k)],
                      asked=plan.k, lengths=lengths, accepted=n_acc)
