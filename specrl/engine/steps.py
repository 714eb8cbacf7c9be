"""The engine's tensor work, in the order of a step: `prefill`, `decode` and `speculate` are what `Engine.run` does
(a speculative step drafts, then verifies: one forward over [last token, drafts...] and the sampling tail), and
return a `Ran` without touching a sequence; `advance` is where postprocess hands the verdict to the sequences and
then lets every drafter observe the forward. Each draws with `hash_uniform(seed, absolute position, stream)`, so a
token does not depend on how the step was batched.
"""
from __future__ import annotations

import time
from typing import NamedTuple

import torch
from torch.nn.utils.rnn import pad_sequence

from ..model import ModelOutput
from .drafting import CatchesUp, Drafter, Plan, Proposal, Shadow, TargetForward, on_device
from .runner import ModelRunner
from .sampler import Sampled, sample
from .sequence import Sequence

ShadowDraft = tuple[str, Sequence, int, list[int]]  # (drafter, row, the row's length when drafted, the draft)


class Drafted(NamedTuple):
    """What a speculative step's drafting made."""
    proposal: Proposal  # [B, K] the drafts verified this step
    drafters: list[str | None]  # per row: the drafter whose drafts it carries (a hybrid's rule applied)
    seconds: dict[str, float]  # per drafter: its propose time, a catch-up included
    catch_up: dict[str, tuple[int, float]]  # per drafter that observes late: inputs caught up on first, seconds
    shadows: list[ShadowDraft]  # the plan's shadow drafts, scored later against what the rows emit


class Ran(NamedTuple):
    """What `Engine.run` computed in one step. No sequence has taken a token yet."""
    phase: str  # "prefill", "decode" (SD off) or "spec" (one verify forward)
    sampled: Sampled  # per row: the verdict (accepted drafts + 1 tokens) and its logprobs
    fwd: TargetForward | None  # what the drafters observe, all of each row's verdict (None: no drafter)
    tokens_in: int  # inputs of the target forward (all rows, drafts and padding included)
    drafted: Drafted | None = None  # a speculative step's drafting
    draft_s: float = 0.0
    verify_s: float = 0.0  # the target forward, sampling and verification


def prefill(runner: ModelRunner, groups: list[list[Sequence]], observed: bool) -> Ran:
    """One forward per distinct prompt, and each sample's first token; `observed`: the drafters will see it."""
    # step 1: one forward per distinct prompt; siblings get a copy of its cache rows
    out = runner.prefill([g[0].prompt for g in groups], [g[0].slot for g in groups])
    for g in groups:
        runner.copy_slot(g[0].slot, [s.slot for s in g[1:]], len(g[0].prompt))
    seqs = [s for g in groups for s in g]
    rep = torch.tensor([i for i, g in enumerate(groups) for _ in g], device=runner.device)  # [N]
    lengths = torch.tensor([len(s.prompt) for s in seqs], device=runner.device)  # [N]
    # step 2: each sample draws its first token with its own seed
    sampled = sample(out.logits[rep], seqs, lengths)
    fwd = None
    if observed:  # step 3: the prompt's hidden states, each input paired with the token after it
        first = sampled.verdict.tokens[:, 0].tolist()
        next_tokens = pad_sequence([torch.tensor(s.prompt[1:] + [t]) for s, t in zip(seqs, first)],
                                   batch_first=True).to(runner.device)  # [N, T]
        T = next_tokens.shape[1]
        fwd = TargetForward(seqs, torch.arange(T, device=runner.device).expand(len(seqs), T), next_tokens, lengths,
                            tuple(h[rep] for h in out.hidden), out.last_hidden[rep])
    return Ran("prefill", sampled, fwd, sum(len(g[0].prompt) for g in groups))


def decode(runner: ModelRunner, seqs: list[Sequence]) -> Ran:
    """SD off: the verify of a proposal with no drafts."""
    none = Proposal(torch.zeros(len(seqs), 0, dtype=torch.long, device=runner.device), None, None)
    return Ran("decode", verify(runner, seqs, none)[2], None, len(seqs))


def speculate(runner: ModelRunner, drafters: dict[str, Drafter], seqs: list[Sequence], plan: Plan) -> Ran:
    """Draft -> verify over a capped plan, each part timed (shadow drafts count with the step's other work)."""
    shadows = shadow_drafts(drafters, seqs, plan.shadows)
    t0 = time.perf_counter()
    drafted = draft(drafters, seqs, plan, runner.model.config.vocab_size, runner.device)._replace(shadows=shadows)
    t1 = time.perf_counter()
    out, positions, sampled = verify(runner, seqs, drafted.proposal)
    t2 = time.perf_counter()
    fwd = TargetForward(seqs, positions, sampled.verdict.tokens, sampled.verdict.num_accepted + 1, out.hidden,
                        out.last_hidden)
    return Ran("spec", sampled, fwd, positions.numel(), drafted, t1 - t0, t2 - t1)


def draft(drafters: dict[str, Drafter], seqs: list[Sequence], plan: Plan, vocab: int, device) -> Drafted:
    """One [B, K] proposal over the (capped) plan's rows: a hybrid's lead first, over every row, then each
    drafter over its rows."""
    seconds: dict[str, float] = {}
    catch_up: dict[str, tuple[int, float]] = {}
    which, lead = list(plan.drafters), None
    if plan.lead is not None:  # rows with a full-length lead proposal keep it; the others keep their drafter
        t = time.perf_counter()
        lead = drafters[plan.lead].propose(seqs, plan.k)
        seconds[plan.lead] = time.perf_counter() - t
        which = [plan.lead if c > 0 and n >= c else w for w, n, c in zip(which, lead.lengths.tolist(), plan.k)]
    parts = []
    for name in dict.fromkeys(w for w, ki in zip(which, plan.k) if w is not None and ki > 0):
        rows = [b for b, w in enumerate(which) if w == name and plan.k[b] > 0]
        t = time.perf_counter()
        if name == plan.lead:
            prop = cut(on_device(lead, device), rows, [plan.k[b] for b in rows])
        else:
            prop, caught = propose(drafters[name], [seqs[b] for b in rows], [plan.k[b] for b in rows], device)
            if caught[0]:
                catch_up[name] = caught
        parts.append((rows, prop))
        seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t
    if len(parts) == 1 and len(parts[0][0]) == len(seqs):
        return Drafted(parts[0][1], which, seconds, catch_up, [])
    return Drafted(merge_proposals(parts, len(seqs), vocab, device), which, seconds, catch_up, [])


def propose(drafter: Drafter, seqs: list[Sequence], k: list[int], device) -> tuple[Proposal, tuple[int, float]]:
    """`drafter`'s proposal on `device`, and the inputs a drafter that observes late caught up on before it
    drafted, with the seconds that took (the adaptive engine prices a catch-up apart from drafting)."""
    caught = (0, 0.0)
    if isinstance(drafter, CatchesUp):
        t = time.perf_counter()
        inputs = drafter.catch_up()
        caught = (inputs, time.perf_counter() - t)
    return on_device(drafter.propose(seqs, k), device), caught


def shadow_drafts(drafters: dict[str, Drafter], seqs: list[Sequence], shadows: list[Shadow]) -> list[ShadowDraft]:
    """Each shadow's drafter proposes for its rows; the drafts, with each row's length now, for scoring later."""
    out = []
    for sh in shadows:
        rows = [seqs[b] for b in sh.rows]
        prop = drafters[sh.drafter].propose(rows, [sh.k] * len(rows))
        for seq, toks, length in zip(rows, prop.tokens.tolist(), prop.lengths.tolist()):
            out.append((sh.drafter, seq, seq.num_tokens, toks[:length]))
    return out


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


def verify(runner: ModelRunner, seqs: list[Sequence], prop: Proposal) -> tuple[ModelOutput, torch.Tensor, Sampled]:
    """One forward over [last token, drafts...] of every sequence, and the sampling tail on it."""
    K = prop.tokens.shape[1]
    last = torch.tensor([[s.tokens[-1]] for s in seqs], device=runner.device)  # [B, 1]
    start = torch.tensor([s.num_tokens for s in seqs], device=runner.device)  # [B] position of the first new token
    positions = (start - 1)[:, None] + torch.arange(K + 1, device=runner.device)  # [B, K+1]
    out = runner.forward(torch.cat([last, prop.tokens], dim=1), positions, [s.slot for s in seqs])
    return out, positions, sample(out.logits, seqs, start, prop)


def advance(observer: Drafter | None, seqs: list[Sequence], ran: Ran) -> list[int]:
    """Each sequence takes what its verdict kept, cut at a stop token/string or its budget; then the drafters
    observe the forward, reading the sequences as they now are (a suffix drafter indexes the appended tokens,
    which siblings read at once). Returns how many tokens each kept."""
    s = ran.sampled
    n_acc, toks, lps = s.verdict.num_accepted.tolist(), s.verdict.tokens.tolist(), s.logprobs.tolist()
    kept = [seq.append(toks[b][:n_acc[b] + 1], lps[b][:n_acc[b] + 1], s.tops[b][:n_acc[b] + 1] if s.tops else None)
            for b, seq in enumerate(seqs)]
    if observer is not None and ran.fwd is not None:
        # inputs whose next token a row did not keep (past its stop, or its budget) are no part of it
        dropped = s.verdict.num_accepted + 1 - torch.tensor(kept, device=ran.fwd.valid.device)  # [B]
        observer.observe(ran.fwd._replace(valid=ran.fwd.valid - dropped))
    return kept
