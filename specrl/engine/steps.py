"""The engine's kinds of step, as tensor work over a list of running sequences: a speculative step is draft ->
verify -> advance, a decode step its verify with no drafts, and a prefill samples its first tokens with the same
tail (`sample`). Each draws with `hash_uniform(seed, absolute position, stream)`, so a token does not depend on
how the step was batched, and returns a `StepResult`, touching no counters.
"""
from __future__ import annotations

import time
from typing import NamedTuple

import torch
from torch.nn.utils.rnn import pad_sequence

from .drafting import Drafter, Proposal, TargetForward, on_device
from .result import StepResult
from .rng import STREAM_ACCEPT, STREAM_SAMPLE
from ..model import ModelOutput
from .runner import ModelRunner
from .sampling import batch_params, hash_uniform, sample_from, target_probs, token_logprobs
from .sequence import Sequence
from .strategy import Plan
from .verify import Verdict, draft_q, verify


class Sampled(NamedTuple):
    verdict: Verdict  # accepted drafts and [B, K+1] tokens (the sample at index num_accepted)
    logprobs: torch.Tensor  # [B, K+1] the policy's temperature-scaled logprobs of those tokens
    tops: list | None  # top-N logprob dicts per row and position, None when no row asked


def sample(logits: torch.Tensor, seqs: list[Sequence], start: torch.Tensor, prop: Proposal | None = None) -> Sampled:
    """The one sampling tail. logits [B, K+1, V] predict the tokens at positions start + j ([B] start); with
    drafts `prop` [B, K] the verdict accepts a prefix of them and samples the token after it. Every use of p
    (sampling, greedy argmax, acceptance, residual, bonus) sees the min_tokens mask and the repetition penalty,
    so speculative decoding samples from plain decoding's distribution; the logprobs returned stay the policy's
    own temperature-scaled ones, before masks and penalties (the RL contract)."""
    temperature, top_k, top_p, seeds = batch_params(seqs, logits.device)
    drafts = None if prop is None else prop.tokens
    shaped = apply_min_tokens(apply_repetition_penalty(logits, seqs, drafts), seqs)  # [B, K+1, V]
    p = target_probs(shaped, temperature, top_k, top_p)  # [B, K+1, V]: the same shaped p with drafts or without
    positions = start[:, None] + torch.arange(logits.shape[1], device=logits.device)  # [B, K+1]
    u_sample = hash_uniform(seeds, positions, STREAM_SAMPLE)  # [B, K+1]
    if drafts is None or drafts.shape[1] == 0:
        verdict = Verdict(torch.zeros(len(seqs), dtype=torch.long, device=logits.device), sample_from(p, u_sample))
    else:
        q = draft_q(drafts, prop.probs, prop.lengths, p.shape[-1])  # [B, K, V]
        verdict = verify(p, drafts, q, hash_uniform(seeds, positions[:, :-1], STREAM_ACCEPT), u_sample)
    logprobs = token_logprobs(logits, verdict.tokens, temperature)  # [B, K+1]
    return Sampled(verdict, logprobs, top_logprob_dicts(logits, verdict.tokens, logprobs, seqs, temperature))


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


def apply_min_tokens(logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
    """logits [B, T, V] for each sequence's next T tokens -> stop/EOS ids at -inf while under min_tokens."""
    B, T, V = logits.shape
    under = [max(0, s.params.min_tokens - len(s.output)) for s in seqs]  # positions still under min_tokens
    if not any(under) or not any(s.stop_ids for s in seqs):
        return logits
    banned = torch.zeros(B, V, dtype=torch.bool)  # [B, V]
    for b, s in enumerate(seqs):
        ids = [i for i in s.stop_ids if 0 <= i < V]
        if under[b] and ids:
            banned[b, ids] = True
    active = (torch.arange(T)[None, :] < torch.tensor(under)[:, None]).to(logits.device)  # [B, T]
    return logits.masked_fill(banned.to(logits.device)[:, None, :] & active[..., None], float("-inf"))


def apply_repetition_penalty(logits: torch.Tensor, seqs: list[Sequence],
                             drafts: torch.Tensor | None = None) -> torch.Tensor:
    """logits [B, T, V] for each sequence's next T tokens; position t's context is the prompt, the output and
    drafts[:, :t] [B, T-1]. A draft is only ever judged by p at positions whose earlier drafts were all accepted,
    where this context is the real one, so verification stays exact."""
    if all(s.params.repetition_penalty == 1.0 for s in seqs):
        return logits
    B, T, V = logits.shape
    seen = torch.zeros(B, V, dtype=torch.bool, device=logits.device)  # [B, V] prompt + output
    for b, s in enumerate(seqs):
        seen[b, torch.tensor(s.tokens, device=logits.device).clamp(0, V - 1)] = True
    seen = seen[:, None, :].expand(B, T, V)  # [B, T, V]
    if drafts is not None and T > 1:
        one_hot = torch.zeros(B, T - 1, V, device=logits.device).scatter_(-1, drafts[:, :T - 1, None], 1.0)
        before = torch.cat([torch.zeros_like(one_hot[:, :1]), one_hot.cumsum(1)], dim=1) > 0  # [B, T, V]
        seen = seen | before
    # CTRL / vLLM: a seen token's logit is divided by the penalty when positive, multiplied when negative
    pen = torch.tensor([s.params.repetition_penalty for s in seqs], device=logits.device).to(logits.dtype)  # [B]
    pen = pen[:, None, None]
    return torch.where(seen, torch.where(logits > 0, logits / pen, logits * pen), logits)


def top_logprob_dicts(logits: torch.Tensor, tokens: torch.Tensor, logprobs: torch.Tensor, seqs: list[Sequence],
                      temperature: torch.Tensor) -> list[list[dict[int, float]]] | None:
    """Per sequence and position: {token id: logprob} of its top-N plus the sampled token (vLLM's shape);
    None when no sequence asked for logprobs. logits [B, T, V], tokens/logprobs [B, T]."""
    wanted = [s.params.logprobs for s in seqs]
    if all(n is None for n in wanted):
        return None
    temp = torch.where(temperature == 0, torch.ones_like(temperature), temperature)  # greedy rows: T = 1
    logp = torch.log_softmax(logits.float() / temp[:, None, None], dim=-1)  # [B, T, V]
    values, ids = logp.topk(min(max(n or 0 for n in wanted), logp.shape[-1]), dim=-1)  # [B, T, N]
    values, ids, toks, lps = values.tolist(), ids.tolist(), tokens.tolist(), logprobs.tolist()
    out = [[dict(zip(ids[b][t][:n or 0], values[b][t][:n or 0])) for t in range(len(toks[b]))]
           for b, n in enumerate(wanted)]
    for b, rows in enumerate(out):
        for t, row in enumerate(rows):
            row.setdefault(toks[b][t], lps[b][t])  # the sampled token, when outside the top-N
    return out
