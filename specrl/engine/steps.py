"""The engine's three kinds of step, as tensor work over a list of running sequences.

Each samples with `hash_uniform(seed, absolute position, stream)`, so the token drawn at a position does not
depend on how the step was batched; a speculative step that proposes nothing is a plain decode step.
"""
from __future__ import annotations

import time

import torch

from .drafting import Drafter, TargetForward, on_device
from .rng import STREAM_ACCEPT, STREAM_SAMPLE
from .runner import ModelRunner
from .sampling import batch_params, hash_uniform, sample_from, target_probs, token_logprobs
from .sequence import Sequence
from .stats import EngineStats
from .verify import Verdict, draft_q, verify
from .token_options import apply_min_tokens, apply_repetition_penalty, top_logprob_dicts


def prefill_step(runner: ModelRunner, groups: list[list[Sequence]], drafter: Drafter | None,
                 stats: EngineStats) -> None:
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
    stats.prefill_tokens += sum(len(g[0].prompt) for g in groups)
    stats.generated_tokens += len(seqs)
    stats.target_forwards += 1
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


def refill_step(runner: ModelRunner, seqs: list[Sequence]) -> None:
    """After a weight update in flight: recompute the running sequences' cache with the new weights, so
    their next tokens are sampled from the new policy exactly (as if it had generated the prefix itself).
    Every input but the last, which the next step feeds, is written; the drafter keeps its own state (stale
    drafts only lower acceptance)."""
    runner.prefill([s.tokens[:-1] for s in seqs], [s.slot for s in seqs], cache_only=True)


def decode_step(runner: ModelRunner, seqs: list[Sequence], stats: EngineStats) -> None:
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
    stats.generated_tokens += len(seqs)
    stats.decode_tokens += len(seqs)
    stats.seq_forwards += len(seqs)
    stats.target_forwards += 1


def spec_step(runner: ModelRunner, drafter: Drafter, seqs: list[Sequence], k: list[int],
              stats: EngineStats) -> dict:
    device = runner.device
    # step 1: draft; never more than the sequence may still emit minus the bonus token
    t0 = time.perf_counter()
    ks = [max(0, min(ki, s.budget - 1)) for ki, s in zip(k, seqs)]
    prop = on_device(drafter.propose(seqs, ks), device)
    t1 = time.perf_counter()
    # step 2: verify [last token, drafts...] for every sequence in one forward
    B, K = prop.tokens.shape
    last = torch.tensor([[s.tokens[-1]] for s in seqs], device=device)  # [B, 1]
    start = torch.tensor([s.num_tokens for s in seqs], device=device)  # [B] position of the first new token
    positions = (start - 1)[:, None] + torch.arange(K + 1, device=device)  # [B, K+1]
    out = runner.forward(torch.cat([last, prop.tokens], dim=1), positions, [s.slot for s in seqs])
    temperature, top_k, top_p, seeds = batch_params(seqs, device)
    shaped = apply_min_tokens(apply_repetition_penalty(out.logits, seqs, prop.tokens), seqs)  # [B, K+1, V]
    p = target_probs(shaped, temperature, top_k, top_p)  # [B, K+1, V]: the same shaped p as plain decoding
    u_sample = hash_uniform(seeds, positions + 1, STREAM_SAMPLE)  # [B, K+1]
    if K == 0:  # nothing proposed (e.g. "auto" turned SD off): a plain decode step
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
    drafter.observe(TargetForward(seqs, positions, verdict.tokens, torch.tensor(kept, device=device),
                                  out.hidden, out.last_hidden))
    lengths = prop.lengths.tolist()
    for length, acc in zip(lengths, n_acc):
        for i in range(length):
            stats.drafted_at[i] += 1
            stats.accepted_at[i] += i < acc
    emitted = sum(kept)
    stats.generated_tokens += emitted
    stats.decode_tokens += emitted
    stats.seq_forwards += B
    stats.target_forwards += 1
    stats.draft_tokens += sum(lengths)
    stats.accepted_tokens += sum(n_acc)
    stats.draft_s += t1 - t0
    stats.verify_s += t2 - t1
    return {"k": max(ks, default=0), "draft_tokens": sum(lengths), "accepted_tokens": sum(n_acc),
            "emitted_tokens": emitted, "tokens_in": B * (K + 1), "draft_s": t1 - t0, "verify_s": t2 - t1}
