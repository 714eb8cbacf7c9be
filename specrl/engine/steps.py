"""The engine's three kinds of step, as tensor work over a list of running sequences.

Each samples with `hash_uniform(seed, absolute position, stream)`, so the token drawn at a position does not
depend on how the step was batched; a speculative step that proposes nothing is a plain decode step. Each
returns a `StepResult` (engine/result.py) and touches no counters: the engine's postprocess reads it once.
"""
from __future__ import annotations

import time

import torch

from .drafting import Drafter, Proposal, TargetForward, on_device
from .result import StepResult
from .rng import STREAM_ACCEPT, STREAM_SAMPLE
from .runner import ModelRunner
from .sampling import batch_params, hash_uniform, sample_from, target_probs, token_logprobs
from .sequence import Sequence
from .verify import Verdict, draft_q, verify
from .token_options import apply_min_tokens, apply_repetition_penalty, top_logprob_dicts


def prefill_step(runner: ModelRunner, groups: list[list[Sequence]], drafter: Drafter | None) -> StepResult:
    # step 1: one forward per distinct prompt; siblings get a copy of its cache rows
    out = runner.prefill([g[0].prompt for g in groups], [g[0].slot for g in groups])
    for g in groups:
        runner.copy_slot(g[0].slot, [s.slot for s in g[1:]], len(g[0].prompt))
    seqs = [s for g in groups for s in g]
    rep = torch.tensor([i for i, g in enumerate(groups) for _ in g], device=runner.device)  # [N]
    # step 2: each sample draws its first token with its own seed
    logits = out.logits[rep]  # [N, 1, V]
    temperature, top_k, top_p, seeds = batch_params(seqs, runner.device)
    positions = torch.tensor([[len(s.prompt)] for s in seqs], device=runner.device)  # [N, 1]
    shaped = apply_min_tokens(apply_repetition_penalty(logits, seqs), seqs)  # [N, 1, V]
    tokens = sample_from(target_probs(shaped, temperature, top_k, top_p),
                         hash_uniform(seeds, positions, STREAM_SAMPLE))  # [N, 1]
    logprobs = token_logprobs(logits, tokens, temperature)  # [N, 1]
    tops = top_logprob_dicts(logits, tokens, logprobs, seqs, temperature)
    for b, (s, t, lp) in enumerate(zip(seqs, tokens[:, 0].tolist(), logprobs[:, 0].tolist())):
        s.append([t], [lp], tops[b] if tops else None)
    # step 3: the drafter sees the prompt's hidden states, each input paired with the token after it
    if drafter is not None:
        T = max(len(g[0].prompt) for g in groups)
        next_tokens = torch.zeros(len(seqs), T, dtype=torch.long)
        for b, s in enumerate(seqs):
            next_tokens[b, :len(s.prompt)] = torch.tensor(s.prompt[1:] + s.output[:1])
        drafter.observe(TargetForward(
            seqs, torch.arange(T, device=runner.device).expand(len(seqs), T), next_tokens.to(runner.device),
            torch.tensor([len(s.prompt) for s in seqs], device=runner.device),
            tuple(h[rep] for h in out.hidden), out.last_hidden[rep]))
    return StepResult("prefill", seqs, tokens_in=sum(len(g[0].prompt) for g in groups), emitted_tokens=len(seqs))


def refill_step(runner: ModelRunner, seqs: list[Sequence]) -> None:
    """After a weight update in flight: recompute the running sequences' cache with the new weights, so
    their next tokens are sampled from the new policy exactly (as if it had generated the prefix itself).
    Every input but the last, which the next step feeds, is written; the drafter keeps its own state (stale
    drafts only lower acceptance)."""
    runner.prefill([s.tokens[:-1] for s in seqs], [s.slot for s in seqs], cache_only=True)


def decode_step(runner: ModelRunner, seqs: list[Sequence]) -> StepResult:
    device = runner.device
    tokens = torch.tensor([[s.tokens[-1]] for s in seqs], device=device)  # [B, 1]
    positions = torch.tensor([[s.num_tokens - 1] for s in seqs], device=device)  # [B, 1]
    logits = runner.forward(tokens, positions, [s.slot for s in seqs]).logits  # [B, 1, V]
    temperature, top_k, top_p, seeds = batch_params(seqs, device)
    shaped = apply_min_tokens(apply_repetition_penalty(logits, seqs), seqs)  # [B, 1, V]
    new = sample_from(target_probs(shaped, temperature, top_k, top_p),
                      hash_uniform(seeds, positions + 1, STREAM_SAMPLE))  # [B, 1]
    logprobs = token_logprobs(logits, new, temperature)  # [B, 1]
    tops = top_logprob_dicts(logits, new, logprobs, seqs, temperature)
    for b, (s, t, lp) in enumerate(zip(seqs, new[:, 0].tolist(), logprobs[:, 0].tolist())):
        s.append([t], [lp], tops[b] if tops else None)
    return StepResult("decode", seqs, tokens_in=len(seqs), emitted_tokens=len(seqs))


def merge_proposals(parts: list[tuple[list[int], Proposal]], B: int, vocab: int, device) -> Proposal:
    """One [B, K] proposal from several drafters' proposals over disjoint rows (`rows`, `proposal`). When any
    part carries draft distributions, the point drafts of the others become one-hot rows of q, so one
    verify handles both; rows no part covers draft nothing."""
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
            if p.probs is not None:
                probs[idx, :Kp] = p.probs.float()
            else:
                one_hot = torch.zeros(len(rows), Kp, vocab, device=device)  # [R, Kp, V]
                probs[idx, :Kp] = one_hot.scatter_(-1, p.tokens[..., None], 1.0)
    return Proposal(tokens, lengths, probs)


def spec_step(runner: ModelRunner, drafters: dict[str, Drafter], observer: Drafter, seqs: list[Sequence],
              which: list[str | None], k: list[int], ready: dict[str, Proposal] | None = None) -> StepResult:
    """One verify forward over every running sequence. Row b carries up to k[b] drafts from drafter
    `which[b]` (None or k = 0: no draft); `ready` holds proposals the schedule already made (over all rows,
    cut here to each row's k). Every drafter in `observer` sees the forward, drafting or not."""
    device = runner.device
    ready = ready or {}
    # step 1: draft, per drafter over its rows; never more than the sequence may still emit minus the bonus
    ks = [max(0, min(ki, s.budget - 1)) if w is not None else 0 for ki, s, w in zip(k, seqs, which)]
    parts, draft_s_by, t0 = [], {}, time.perf_counter()
    for name in dict.fromkeys(w for w, ki in zip(which, ks) if w is not None and ki > 0):
        rows = [b for b, w in enumerate(which) if w == name and ks[b] > 0]
        t = time.perf_counter()
        if name in ready:
            prop = cut(on_device(ready[name], device), rows, [ks[b] for b in rows])
        else:
            prop = on_device(drafters[name].propose([seqs[b] for b in rows], [ks[b] for b in rows]), device)
        parts.append((rows, prop))
        draft_s_by[name] = time.perf_counter() - t
    B = len(seqs)
    prop = parts[0][1] if len(parts) == 1 and len(parts[0][0]) == B else \
        merge_proposals(parts, B, runner.model.config.vocab_size, device)
    t1 = time.perf_counter()
    # step 2: verify [last token, drafts...] for every sequence in one forward
    K = prop.tokens.shape[1]
    last = torch.tensor([[s.tokens[-1]] for s in seqs], device=device)  # [B, 1]
    start = torch.tensor([s.num_tokens for s in seqs], device=device)  # [B] position of the first new token
    positions = (start - 1)[:, None] + torch.arange(K + 1, device=device)  # [B, K+1]
    out = runner.forward(torch.cat([last, prop.tokens], dim=1), positions, [s.slot for s in seqs])
    temperature, top_k, top_p, seeds = batch_params(seqs, device)
    shaped = apply_min_tokens(apply_repetition_penalty(out.logits, seqs, prop.tokens), seqs)  # [B, K+1, V]
    p = target_probs(shaped, temperature, top_k, top_p)  # [B, K+1, V]: the same shaped p as plain decoding
    u_sample = hash_uniform(seeds, positions + 1, STREAM_SAMPLE)  # [B, K+1]
    if K == 0:  # nothing proposed (e.g. the strategy turned SD off): a plain decode step
        verdict = Verdict(torch.zeros(B, dtype=torch.long, device=device), sample_from(p, u_sample))
    else:
        q = draft_q(prop.tokens, prop.probs, prop.lengths, p.shape[-1])  # [B, K, V]
        verdict = verify(p, prop.tokens, q, hash_uniform(seeds, positions[:, 1:], STREAM_ACCEPT), u_sample)
    logprobs = token_logprobs(out.logits, verdict.tokens, temperature)  # [B, K+1]
    tops = top_logprob_dicts(out.logits, verdict.tokens, logprobs, seqs, temperature)
    t2 = time.perf_counter()
    # step 3: each sequence advances by its accepted drafts + 1, cut at a stop token/string or its budget
    n_acc, toks, lps = verdict.num_accepted.tolist(), verdict.tokens.tolist(), logprobs.tolist()
    kept = [s.append(toks[b][:n_acc[b] + 1], lps[b][:n_acc[b] + 1], tops[b][:n_acc[b] + 1] if tops else None)
            for b, s in enumerate(seqs)]
    observer.observe(TargetForward(seqs, positions, verdict.tokens, torch.tensor(kept, device=device),
                                   out.hidden, out.last_hidden))
    lengths = prop.lengths.tolist()
    drafted_by = [w if n > 0 else None for w, n in zip(which, lengths)]
    return StepResult("spec", seqs, tokens_in=B * (K + 1), emitted_tokens=sum(kept), k=max(ks, default=0),
                      draft_tokens=sum(lengths), accepted_tokens=sum(n_acc), draft_s=t1 - t0, verify_s=t2 - t1,
                      drafters=drafted_by, drafters_asked=[w if ki > 0 else None for w, ki in zip(which, ks)],
                      asked=ks, lengths=lengths, accepted=n_acc, draft_s_by=draft_s_by)


def cut(prop: Proposal, rows: list[int], k: list[int]) -> Proposal:
    """Rows `rows` of a proposal made over every running sequence, each cut to its k (a prefix of a draft
    is itself a draft: the schedule may ask a cheap drafter first and keep part of what it proposed)."""
    idx = torch.tensor(rows, dtype=torch.long, device=prop.tokens.device)
    K = min(max(k, default=0), prop.tokens.shape[1])
    lengths = torch.minimum(prop.lengths[idx], torch.tensor(k, dtype=torch.long, device=idx.device))
    return Proposal(prop.tokens[idx, :K], lengths, None if prop.probs is None else prop.probs[idx, :K])
