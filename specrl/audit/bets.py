"""The bets of the sampler audit's test martingale: pure, batched tensor math over the sampler's distribution.

Each audited token x ~ p (the distribution the sampler was told to use: temperature, top-k and top-p applied)
is bet on with b(x) = 1 - lam + lam * q(x) / p(x), where q is an alternative built from p alone: p tempered
(q ~ p^a on p's support), p cut to its top-p nucleus, or p with its tail inflated. Whatever q and lam in
[0, 1), sum_x p(x) b(x) = 1 - lam + lam * sum_x q(x) = 1 exactly, so the running product of the bets is a
nonnegative martingale of mean 1 under an exact sampler whose rows are independent draws (each token drawn from
p given its own row alone; DESIGN.md, "The sampler audit"). A token p gives no
mass is certain evidence and is counted apart (`impossible`), never bet on.
"""
from __future__ import annotations

import math

from typing import NamedTuple

import torch

TAUS = (0.8, 0.9, 0.95, 1.05, 1.1, 1.25)  # tempered alternatives q ~ p^(1/tau): too sharp (< 1) and too flat (> 1)
NUCLEUS = 0.9  # the top-p cut alternative: p restricted to its smallest prefix of this much mass
TAIL = 0.1  # the tail-inflated alternative: (1 - TAIL) p + TAIL * uniform over p's support
ALTERNATIVES = len(TAUS) + 2
LAMBDAS = (0.05, 0.2, 0.5, 0.9)  # each alternative's bet sizes, mixed with equal weights (never 1: a q(x) = 0 costs
# a component at most log(1 - lam), so none is ruined by one token)
COMPONENTS = ALTERNATIVES * len(LAMBDAS)


class Ranked(NamedTuple):
    """Where each target stands in its distribution, the vocabulary ordered by probability, descending (ties:
    lower id first, a stable sort)."""
    before: torch.Tensor  # [n] float64 mass of the tokens ranked strictly before the target (the PIT's)
    nucleus_mass: torch.Tensor  # [n] float64 mass of the NUCLEUS cut: the tokens with less than NUCLEUS before them


def ranked(p: torch.Tensor, targets: torch.Tensor) -> Ranked:
    """p [n, V] float64, targets [n]. One sort gives both, so the nucleus a target is tested against is the one
    whose mass normalises the bet."""
    sorted_p, order = p.sort(dim=-1, descending=True, stable=True)  # [n, V]
    mass_before = sorted_p.cumsum(-1) - sorted_p  # [n, V]
    rank = (order == targets[:, None]).int().argmax(-1, keepdim=True)  # [n, 1]
    return Ranked(mass_before.gather(-1, rank)[:, 0], (sorted_p * (mass_before < NUCLEUS)).sum(-1))


def log_ratios(p: torch.Tensor, targets: torch.Tensor, rank: Ranked | None = None) -> torch.Tensor:
    """[n, ALTERNATIVES] log q_j(x) / p(x) of each target under each alternative (0 where p(x) = 0, which
    `impossible` counts instead). p [n, V] (float64 is used), targets [n]; `rank`: `ranked(p, targets)`, if known."""
    p = p.double()  # [n, V]
    p_x = p.gather(-1, targets[:, None])[:, 0]  # [n]
    support = p > 0  # [n, V]
    logp = torch.where(support, p.clamp_min(1e-300).log(), float("-inf"))  # [n, V]
    logp_x = p_x.clamp_min(1e-300).log()  # [n]
    cols = []
    for tau in TAUS:  # q = p^a / sum p^a: log r = (a - 1) log p(x) - log sum p^a
        a = 1.0 / tau
        cols.append((a - 1) * logp_x - torch.logsumexp(a * logp, -1))
    rank = ranked(p, targets) if rank is None else rank
    # the nucleus: r = 1 / its mass inside, 0 outside
    cols.append(torch.where(rank.before < NUCLEUS, -rank.nucleus_mass.log(), float("-inf")))
    size = support.sum(-1).double()  # [n] tokens in p's support
    cols.append(torch.log((1 - TAIL) + TAIL / (size * p_x.clamp_min(1e-300))))
    out = torch.stack(cols, -1)  # [n, J]
    return torch.where((p_x > 0)[:, None], out, 0.0)


def log_bets(log_r: torch.Tensor) -> torch.Tensor:
    """[n, COMPONENTS] log b = log(1 - lam + lam * r) of every (alternative, lam) pair, alternative-major;
    log_r [n, ALTERNATIVES] from `log_ratios`."""
    lam = torch.tensor(LAMBDAS, dtype=torch.float64, device=log_r.device)  # [L]
    r = log_r.double().exp()[:, :, None]  # [n, J, 1]; 0 outside the nucleus
    return torch.log1p(lam * (r - 1)).flatten(1)  # [n, J * L]


def log_mixture(log_wealth: torch.Tensor) -> torch.Tensor:
    """log of the equal-weight mixture of the components' wealth: [..., COMPONENTS] -> [...]."""
    return torch.logsumexp(log_wealth, -1) - math.log(log_wealth.shape[-1])


SUM_BLOCK = 1024  # float32 sums over blocks this long, the blocks summed in float64
BINS = 1024  # log-p bins of `nucleus_size`: a bin is 0.07 nats wide
LOW = -69.0  # the lowest log p - log max p `from_logits` keeps: every exponent a * LOW (a <= 1.25) stays above -87
SUBNORMAL = -103.27  # log of float32's smallest subnormal: the engine's float32 softmax gives 0 below it


class LogitScores(NamedTuple):
    """What `token_scores` reads of each target, from `from_logits`."""
    log_r: torch.Tensor  # [n, ALTERNATIVES] float64, as `log_ratios`
    before: torch.Tensor  # [n] float64 mass ranked strictly before the target (ties: lower id first)
    p_x: torch.Tensor  # [n] float64
    max_p: torch.Tensor  # [n] float64


def _sum(x: torch.Tensor) -> torch.Tensor:
    """[n, V] -> [n] float64: float32 sums of SUM_BLOCK blocks, summed in float64 (a float64 sum of the row
    converts every element and costs an order of magnitude more)."""
    n, V = x.shape
    if V % SUM_BLOCK:
        return x.sum(-1).double()
    return x.view(n, -1, SUM_BLOCK).sum(-1).double().sum(-1)


class Workspace:
    """The [n, V] buffers `from_logits` writes into, kept between calls: a fresh buffer of this size is fresh pages
    from the OS, and on a CPU faulting them in costs more than the arithmetic that fills them."""

    def __init__(self):
        self._bufs: dict[tuple, torch.Tensor] = {}

    def get(self, name: str, like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        key = (name, dtype or like.dtype, like.device)
        buf = self._bufs.get(key)
        if buf is None or buf.numel() < like.numel():
            buf = self._bufs[key] = torch.empty(like.numel(), dtype=dtype or like.dtype, device=like.device)
        return buf[:like.numel()].view(like.shape)


def from_logits(z: torch.Tensor, targets: torch.Tensor, ws: Workspace | None = None) -> LogitScores:
    """`log_ratios` and the PIT's inputs for p = softmax(z), z [n, V] the temperature-scaled logits (no top-k or
    top-p cut), without a sort of the vocabulary or a float64 copy of it: the passes over [n, V] are float32 in
    the reused buffers of `ws` (exp of z - max, and sums in blocks: their rounding, about 1e-7, is far below the
    gap between the trainer's logits and the engine's), the per-token math float64. The nucleus comes from a
    histogram of log p (`nucleus_size`), a target's rank from counting the tokens before it, so ties are ordered
    by id as the stable sort of `ranked` orders them."""
    ws = ws or Workspace()
    z = z.float()
    raw = torch.sub(z, z.amax(-1, keepdim=True), out=ws.get("raw", z))  # [n, V] log p - log max p
    # below LOW p < 1e-30, and exp under -87 takes the CPU's slow path (float32 underflow)
    d = torch.clamp_min(raw, LOW, out=ws.get("d", z))  # [n, V]
    e = torch.exp(d, out=ws.get("e", z))  # [n, V] p up to 1 / s
    mask = ws.get("mask", z, torch.bool)  # [n, V]
    s = _sum(e)  # [n]
    log_s = s.log()
    floor = (log_s + SUBNORMAL)[:, None]  # [n, 1] the engine's float32 softmax is 0 at or below it
    support = _support(raw, floor, mask)  # [n] what the engine can sample
    raw_x = raw.gather(-1, targets[:, None]).double()  # [n, 1] unclamped: a token the engine cannot draw has p 0
    p_x = torch.where(raw_x > floor, (raw_x - log_s[:, None]).exp(), 0.0)[:, 0]  # [n]
    buf = raw  # reused from here on
    e_x = e.gather(-1, targets[:, None])  # [n, 1]
    logp_x = p_x.clamp_min(1e-300).log()
    cols = []
    for tau in TAUS:  # log sum p^a = log sum e^a - a log s
        a = 1.0 / tau
        cols.append((a - 1) * logp_x - (_sum(torch.mul(d, a, out=buf).exp_()).log() - a * log_s))
    rank, ahead_e, tied = _ahead(e, e_x, buf, ws)  # [n] tokens before the target, their e; [n] bool ties
    if bool(tied.any()):  # another token as likely as the target (bf16): those with a lower id are before it
        ids = torch.arange(z.shape[-1], device=z.device)
        low = (e[tied] == e_x[tied]) & (ids < targets[tied, None])  # [t, V]
        rank[tied] += low.count_nonzero(-1)
        ahead_e[tied] += low.count_nonzero(-1).double() * e_x[tied, 0].double()
    before = ahead_e / s  # [n]
    size, m = nucleus_size(e, s, d, ws)  # tokens in the nucleus, their mass
    cols.append(torch.where(rank < size, -m.log(), float("-inf")))
    cols.append(torch.log((1 - TAIL) + TAIL / (support * p_x.clamp_min(1e-300))))
    log_r = torch.where((p_x > 0)[:, None], torch.stack(cols, -1), 0.0)  # [n, J]
    return LogitScores(log_r, before, p_x, 1.0 / s)


def _support(raw: torch.Tensor, floor: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[n] float64 tokens above `floor` [n, 1] of `raw` [n, V]: a row whose least token is above it (most) is
    counted by that minimum alone, without a pass of comparisons."""
    n, V = raw.shape
    support = torch.full((n,), float(V), dtype=torch.float64, device=raw.device)
    low = raw.amin(-1) <= floor[:, 0].float()  # [n] rows with a token the engine cannot draw
    if bool(low.any()):
        m = mask[:int(low.sum())]
        support[low] = torch.gt(raw[low], floor[low].float(), out=m).count_nonzero(-1).double()
    return support


def _ahead(e: torch.Tensor, e_x: torch.Tensor, buf: torch.Tensor, ws: Workspace
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(tokens likelier than the target [n] long, their sum of e [n] float64, [n] bool whether another token
    is exactly as likely) for e [n, V] and the target's e_x [n, 1]. Float passes (sign, clamp, sums) instead of
    comparisons to bool, which a CPU runs several times slower: with diff = e - e_x, the sum of sign(diff) is
    (likelier - less likely), of sign(max(diff, 0)) the likelier tokens, of max(diff, 0) their mass less e_x
    each; the counts are exact integers in float32 (V < 2^24)."""
    V = e.shape[-1]
    diff = torch.sub(e, e_x, out=buf)  # [n, V]
    sg = torch.sign(diff, out=ws.get("sign", e))  # [n, V]
    net = _sum(sg)  # [n] likelier less less likely
    above = _sum(diff.clamp_min_(0))  # [n] sum of e - e_x over the likelier
    gt = _sum(torch.sign(diff, out=sg))  # [n] the likelier
    ties = V - gt - (gt - net)  # [n] as likely as the target, the target included
    return gt.round().long(), above + gt * e_x[:, 0].double(), ties.round() > 1


def nucleus_size(e: torch.Tensor, s: torch.Tensor, d: torch.Tensor | None = None, ws: Workspace | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens [n], mass [n] float64) of the NUCLEUS cut of p = e / s, e [n, V] (d: log e, if known): the tokens
    with less than NUCLEUS ranked before them. Up to BINS tokens a row: one sort. Above: one histogram of log p
    in BINS bins a row: the bins above the one where the mass reaches NUCLEUS are in whole, that bin's few
    tokens are ranked. Ties inside the cut all have the same mass, so their order does not matter."""
    n, V = e.shape
    if V <= BINS:  # a sort of a short row costs less than a histogram of BINS bins
        top = e.sort(-1, descending=True).values.double() / s[:, None]  # [n, V]
        keep = (top.cumsum(-1) - top) < NUCLEUS  # [n, V]
        return keep.sum(-1), (top * keep).sum(-1)
    ws = ws or Workspace()
    d = e.log() if d is None else d
    scaled = torch.mul(d, BINS / LOW, out=ws.get("bins_f", e))  # [n, V]
    b = ws.get("bins", e, torch.long).copy_(scaled).clamp_(0, BINS - 1)  # [n, V] bin 0: the likeliest tokens
    weights = ws.get("e64", e, torch.float64).copy_(e)  # [n, V] float64: the bins sum many tokens
    mass = torch.zeros(n, BINS, dtype=torch.float64, device=e.device).scatter_add_(1, b, weights) / s[:, None]
    ones = torch.ones((), dtype=torch.float32, device=e.device).expand(n, V)
    count = torch.zeros(n, BINS, device=e.device).scatter_add_(1, b, ones).long()  # exact: V < 2^24
    above = mass.cumsum(-1) - mass  # [n, BINS] the mass of the bins before each
    k = ((above + mass) < NUCLEUS).sum(-1).clamp_(max=BINS - 1)  # [n] the bin where the mass reaches NUCLEUS
    base = above.gather(-1, k[:, None])[:, 0]  # [n] every token of the bins before k is in
    sizes = (count.cumsum(-1) - count).gather(-1, k[:, None])[:, 0]  # [n]
    r, c = torch.eq(b, k[:, None], out=ws.get("mask", e, torch.bool)).nonzero(as_tuple=True)  # bin k's tokens
    v = e[r, c].double() / s[r]  # [m]
    order = torch.argsort(r.double() + (1 - v) * 0.5, stable=True)  # by row, then likeliest first
    r, v = r[order], v[order]
    run = v.cumsum(0)  # [m]
    starts = torch.searchsorted(r, torch.arange(n, device=e.device))  # [n] each row's first entry
    offset = torch.where(starts > 0, run[(starts - 1).clamp(min=0)], 0.0)  # [n] the rows before's sum
    keep = base[r] + (run - v - offset[r]) < NUCLEUS  # [m]
    sizes = sizes + torch.bincount(r, weights=keep.double(), minlength=n).long()
    return sizes, base + torch.bincount(r, weights=v * keep, minlength=n)
