"""The sampler: sampling parameters, counter-based randomness, the logits processors (min_tokens, repetition
penalty), the distribution a token is drawn from (`target_probs`), the one rejection sampler (`verify`), top
logprobs, and `sample`, the one sampling tail that every engine step runs.

A random draw is a hash of (seed, position, stream), never the state of a generator, so a sample depends only
on its own seed and the logits: not on the batch it ran in, the scheduler, or whether a step speculated.

`seqs` below are the running `sequence.Sequence`s, read for their params, seed, tokens and stop ids only (this
module sits below sequence.py, which holds a `SamplingParams`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import torch

from ..rl.logprobs import scaled_token_logprobs as token_logprobs  # noqa: F401 (rl owns the logprob kernel)

# splitmix64 (Steele et al. 2014): the golden-ratio increment and the two multipliers of its finaliser
SPLITMIX_GAMMA = 0x9E3779B97F4A7C15
SPLITMIX_MUL1 = 0xBF58476D1CE4E5B9
SPLITMIX_MUL2 = 0x94D049BB133111EB
MASK64 = (1 << 64) - 1

# hash streams: one per use of randomness at a position, so no two uses ever share a uniform
STREAM_SAMPLE = 0  # the token a step emits (decode, bonus or correction)
STREAM_ACCEPT = 1  # accepting draft i
STREAM_DRAFT = 7  # EAGLE-3's sampled drafts


def mix_seed(seed: int, index: int) -> int:
    """A 63-bit seed for sample `index` of a request with seed `seed` (the n samples are independent)."""
    x = (seed * SPLITMIX_GAMMA + index * SPLITMIX_MUL1 + 1) & MASK64
    x ^= x >> 31
    return (x * SPLITMIX_MUL2) & ((1 << 63) - 1)


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 16
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    seed: int | None = None
    stop: list[str] | str | None = None  # stop strings, matched on the decoded text after every token
    include_stop_str_in_output: bool = False
    min_tokens: int = 0  # EOS and stop ids are masked out of the distribution until this many tokens
    logprobs: int | None = None  # top-N logprobs per generated token (in CompletionOutput.top_logprobs)
    skip_special_tokens: bool = True
    repetition_penalty: float = 1.0

    def __post_init__(self):
        # each message is formatted only when its check fails: a rollout builds one of these per request
        self._check(self.temperature >= 0, "temperature={self.temperature} must be >= 0 (0 means greedy)")
        self._check(0 < self.top_p <= 1,
                    "top_p={self.top_p} must be in (0, 1]; use 1.0 to disable nucleus sampling")
        self._check(self.top_k != 0 and self.top_k >= -1, "top_k={self.top_k} must be -1 (disabled) or >= 1")
        self._check(self.n >= 1, "n={self.n} must be >= 1 (samples per prompt)")
        self._check(self.max_tokens >= 1, "max_tokens={self.max_tokens} must be >= 1")
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self._check(self.stop is None or all(isinstance(s, str) and s for s in self.stop),
                    "stop={self.stop!r} must be a list of non-empty strings")
        self._check(0 <= self.min_tokens <= self.max_tokens,
                    "min_tokens={self.min_tokens} must be in [0, max_tokens={self.max_tokens}]")
        self._check(self.logprobs is None or self.logprobs >= 0,
                    "logprobs={self.logprobs} must be None or >= 0 (top-N logprobs per token)")
        self._check(self.repetition_penalty > 0, "repetition_penalty={self.repetition_penalty} must be > 0 (1.0 "
                    "disables it; > 1 discourages tokens already in the prompt or output)")

    def _check(self, ok: bool, message: str) -> None:
        if not ok:
            raise ValueError(message.format(self=self))


def per_prompt(params: SamplingParams, count: int, start: int = 0) -> list[SamplingParams]:
    """`count` copies of `params`, the i-th seeded `params.seed * 1_000_003 + (start + i) * params.n` (None stays
    None): requests that share a seed share their random draws, so equal prompts would be equal samples. The
    seeds lie `n` apart because vLLM seeds a request's j-th sample with seed + j: consecutive seeds would give
    sample j of prompt i and sample j - 1 of prompt i + 1 the same draws, and the audit takes rows as independent."""
    if params.seed is None:
        return [params] * count
    return [replace(params, seed=params.seed * 1_000_003 + (start + i) * params.n) for i in range(count)]


def _to_signed(x: int) -> int:
    x &= MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


_C1, _C2, _C3 = (_to_signed(c) for c in (SPLITMIX_GAMMA, SPLITMIX_MUL1, SPLITMIX_MUL2))


def _shr(x: torch.Tensor, n: int) -> torch.Tensor:
    """Logical right shift on int64 (torch's >> is arithmetic)."""
    return (x >> n) & ((1 << (64 - n)) - 1)


def hash_uniform(seeds: torch.Tensor, positions: torch.Tensor, stream: int) -> torch.Tensor:
    """splitmix64 of (seed, position, stream) -> uniform in (0, 1), float64. seeds: [B], positions: [B, T]."""
    x = seeds[:, None] * _C1 + positions * _C2 + _to_signed((stream + 1) * SPLITMIX_MUL2)  # [B, T] wraps mod 2^64
    x = (x ^ _shr(x, 30)) * _C2
    x = (x ^ _shr(x, 27)) * _C3
    x = x ^ _shr(x, 31)
    return (_shr(x, 11).double() + 0.5) * (2.0 ** -53)


def batch_params(seqs: list, device) -> tuple[torch.Tensor, ...]:
    """Each sequence's sampling settings as tensors: temperature [B], top_k [B], top_p [B], seed [B]."""
    temperature = torch.tensor([s.params.temperature for s in seqs], dtype=torch.float32, device=device)
    top_k = torch.tensor([s.params.top_k for s in seqs], dtype=torch.long, device=device)
    top_p = torch.tensor([s.params.top_p for s in seqs], dtype=torch.float32, device=device)
    seeds = torch.tensor([s.seed for s in seqs], dtype=torch.long, device=device)
    return temperature, top_k, top_p, seeds


def apply_min_tokens(logits: torch.Tensor, seqs: list) -> torch.Tensor:
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


def apply_repetition_penalty(logits: torch.Tensor, seqs: list,
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


def target_probs(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                 top_p: torch.Tensor) -> torch.Tensor:
    """The distribution a token is sampled from, one-hot on the argmax for greedy rows. logits [B, T, V], rest [B]."""
    logits = logits.float()
    greedy = temperature == 0
    temp = torch.where(greedy, torch.ones_like(temperature), temperature)
    scaled = logits / temp[:, None, None]  # [B, T, V]
    V = logits.shape[-1]
    k = torch.where(top_k < 0, torch.full_like(top_k, V), top_k.clamp(max=V))
    if bool((k < V).any()) or bool((top_p < 1).any()):
        scaled = _filter_top_k_top_p(scaled, k, top_p)
    probs = torch.softmax(scaled, dim=-1)  # [B, T, V]
    if bool(greedy.any()):
        one_hot = torch.zeros_like(probs).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
        probs = torch.where(greedy[:, None, None], one_hot, probs)
    return probs


def _filter_top_k_top_p(scaled: torch.Tensor, k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    sorted_logits, order = scaled.sort(dim=-1, descending=True)  # [B, T, V]
    rank = torch.arange(scaled.shape[-1], device=scaled.device)
    drop = (rank[None, None, :] >= k[:, None, None]).expand_as(scaled)  # outside top-k
    probs = torch.softmax(sorted_logits.masked_fill(drop, float("-inf")), dim=-1)
    mass_before = probs.cumsum(-1) - probs  # mass of strictly better tokens
    drop = drop | (mass_before >= top_p[:, None, None])  # nucleus: the smallest prefix reaching top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(scaled, float("-inf")).scatter(-1, order, sorted_logits)


def sample_from(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling. probs: [..., V] (need not be normalised), u: [...] in (0, 1) -> [...] long."""
    cdf = probs.cumsum(-1, dtype=torch.float64)  # [..., V]
    target = (u * cdf[..., -1]).unsqueeze(-1)  # [..., 1]
    idx = torch.searchsorted(cdf, target).squeeze(-1).clamp_max(probs.shape[-1] - 1)  # first cdf >= target
    # rounding can push idx past the last token with mass; fall back to that token (rare: found without a scan)
    past = probs.gather(-1, idx.unsqueeze(-1)).squeeze(-1) <= 0  # [...]
    if bool(past.any()):
        vocab = torch.arange(probs.shape[-1], device=probs.device)  # [V]
        idx = torch.where(past, torch.where(probs > 0, vocab, 0).amax(-1), idx)
    return idx


class Verdict(NamedTuple):
    num_accepted: torch.Tensor  # [B] accepted drafts
    tokens: torch.Tensor  # [B, K+1] accepted drafts, then the correction/bonus token at index num_accepted


def draft_q(draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None, draft_len: torch.Tensor,
            vocab: int) -> torch.Tensor:
    """q over the K draft positions [B, K, V]; zero past each sequence's draft length."""
    B, K = draft_tokens.shape
    if draft_probs is None:
        q = torch.zeros(B, K, vocab, device=draft_tokens.device).scatter_(-1, draft_tokens[..., None], 1.0)
    else:
        q = draft_probs.float()
    live = torch.arange(K, device=q.device)[None, :] < draft_len[:, None]  # [B, K]
    return q * live[..., None]


def verify(p: torch.Tensor, draft_tokens: torch.Tensor, q: torch.Tensor, u_accept: torch.Tensor,
           u_sample: torch.Tensor) -> Verdict:
    """Batched lossless verification (Leviathan et al. 2023; Chen et al. 2023), as one pure function.

    Draft i is accepted with probability min(1, p(x_i) / q(x_i)). At the first rejection the token is drawn from
    norm(max(p - q, 0)); if every draft is accepted a bonus token is drawn from p. Positions past a sequence's
    own draft length act as q = 0, so the "residual" there is p itself: the bonus. A draft without
    probabilities is q = one-hot. Greedy p is one-hot, which reduces all of this to "accept while the draft is
    the argmax, then emit the argmax".

    p: [B, K+1, V] target distributions; draft_tokens: [B, K]; q: [B, K, V] (from `draft_q`);
    u_accept: [B, K] and u_sample: [B, K+1] uniforms in (0, 1)."""
    B, K = draft_tokens.shape
    p_x = p[:, :K].gather(-1, draft_tokens[..., None]).squeeze(-1)  # [B, K]
    q_x = q.gather(-1, draft_tokens[..., None]).squeeze(-1)  # [B, K]
    accept = (u_accept * q_x < p_x) & (q_x > 0)  # u < p/q without dividing; q_x = 0 marks padding
    num_accepted = accept.long().cumprod(-1).sum(-1)  # [B]
    q_pad = torch.cat([q, torch.zeros_like(p[:, :1])], dim=1)  # [B, K+1, V]
    at = num_accepted[:, None, None].expand(-1, 1, p.shape[-1])
    p_at, q_at = p.gather(1, at).squeeze(1), q_pad.gather(1, at).squeeze(1)  # [B, V]
    residual = (p_at - q_at).clamp_min(0)  # [B, V]
    empty = residual.sum(-1, keepdim=True) <= 0  # only through float round-off; p is then the answer
    residual = torch.where(empty, p_at, residual)
    u = u_sample.gather(1, num_accepted[:, None]).squeeze(1)  # [B]
    extra = sample_from(residual, u)  # [B]
    tokens = torch.cat([draft_tokens, draft_tokens.new_zeros(B, 1)], dim=1)  # [B, K+1]
    tokens = tokens.scatter(1, num_accepted[:, None], extra[:, None])
    return Verdict(num_accepted, tokens)


def top_logprob_dicts(logits: torch.Tensor, tokens: torch.Tensor, logprobs: torch.Tensor, seqs: list,
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


class Sampled(NamedTuple):
    verdict: Verdict  # accepted drafts and [B, K+1] tokens (the sample at index num_accepted)
    logprobs: torch.Tensor  # [B, K+1] the policy's temperature-scaled logprobs of those tokens
    tops: list | None  # top-N logprob dicts per row and position, None when no row asked


def sample(logits: torch.Tensor, seqs: list, start: torch.Tensor, prop=None) -> Sampled:
    """The one sampling tail. logits [B, K+1, V] predict the tokens at positions start + j ([B] start); with
    drafts `prop` (a drafting.Proposal: tokens [B, K], lengths [B], probs [B, K, V] or None) the verdict accepts
    a prefix of them and samples the token after it. Every use of p (sampling, greedy argmax, acceptance,
    residual, bonus) sees the min_tokens mask and the repetition penalty, so speculative decoding samples from
    plain decoding's distribution; the logprobs returned stay the policy's own temperature-scaled ones, before
    masks and penalties (the RL contract)."""
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
