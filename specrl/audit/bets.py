"""The bets of the sampler audit's test martingale: pure, batched tensor math over the sampler's distribution.

Each audited token x ~ p (the distribution the sampler was told to use: temperature, top-k and top-p applied)
is bet on with b(x) = 1 - lam + lam * q(x) / p(x), where q is an alternative built from p alone: p tempered,
p cut to its top-p nucleus, or p with its tail inflated. The tempering and the cut are read on a grid of log p
(`bin_of`: BINS bins of WIDTH nats down from the likeliest token): q_a ~ p * exp((a - 1) l(x)), l(x) the middle of
x's bin, and the cut keeps whole bins, so a large vocabulary's alternatives all come from one histogram of p's
mass by bin rather than a pass over the vocabulary each (log q_a is within |a - 1| WIDTH of p^a's). Whatever q
and lam in [0, 1), sum_x p(x) b(x) = 1 - lam + lam * sum_x q(x) = 1 exactly, so the running product of the bets
is a nonnegative martingale of mean 1 under an exact sampler whose rows are independent draws (each token drawn
from p given its own row alone; DESIGN.md, "The sampler audit"). A token p gives no
mass is certain evidence and is counted apart (`impossible`), never bet on.
"""
from __future__ import annotations

import math

from typing import NamedTuple

import torch

TAUS = (0.8, 0.9, 0.95, 1.05, 1.1, 1.25)  # tempered alternatives q ~ p^(1/tau), by bin: < 1 sharper, > 1 flatter
NUCLEUS = 0.9  # the top-p cut alternative: p restricted to its likeliest bins with less than this much mass before
TAIL = 0.1  # the tail-inflated alternative: (1 - TAIL) p + TAIL * uniform over p's support
ALTERNATIVES = len(TAUS) + 2
LAMBDAS = (0.05, 0.2, 0.5, 0.9)  # each alternative's bet sizes, mixed with equal weights (never 1: a q(x) = 0 costs
# a component at most log(1 - lam), so none is ruined by one token)
COMPONENTS = ALTERNATIVES * len(LAMBDAS)


class Ranked(NamedTuple):
    """Where each target stands in its distribution, the vocabulary ordered by probability, descending (ties:
    lower id first, a stable sort)."""
    before: torch.Tensor  # [n] float64 mass of the tokens ranked strictly before the target (the PIT's)


def ranked(p: torch.Tensor, targets: torch.Tensor) -> Ranked:
    """p [n, V] float64, targets [n]."""
    sorted_p, order = p.sort(dim=-1, descending=True, stable=True)  # [n, V]
    mass_before = sorted_p.cumsum(-1) - sorted_p  # [n, V]
    rank = (order == targets[:, None]).int().argmax(-1, keepdim=True)  # [n, 1]
    return Ranked(mass_before.gather(-1, rank)[:, 0])


BINS = 1024  # the grid of log p the tempered and nucleus alternatives are read on: bins of WIDTH nats down from
WIDTH = 0.0673  # the likeliest token, the last holding every token below (p < 1e-29 of the likeliest). Not a dyadic
# fraction: bf16 logits differ by dyadic ones, so with WIDTH = 69 / 1024 ties of them sat on bin edges, each side
# of which rounding could put them
LOW = -69.0  # the lowest log p - log max p `from_logits` keeps: every exponent a * LOW (a <= 1.25) stays above -87


def bin_of(d: torch.Tensor, out: torch.Tensor | None = None, scratch: torch.Tensor | None = None) -> torch.Tensor:
    """The bin [..] long of log p - log max p `d` [..] (<= 0): 0 for the likeliest tokens, BINS - 1 the least
    likely. `out` (long) and `scratch` (d's dtype): buffers of d's shape to write into."""
    scaled = torch.mul(d, -1 / WIDTH, out=scratch).clamp_(0, BINS - 1)  # [..] (clamped here, not as long)
    out = torch.empty(d.shape, dtype=torch.long, device=d.device) if out is None else out
    return out.copy_(scaled)


def level(b: torch.Tensor) -> torch.Tensor:
    """log p - log max p [..] float64 that tempers bin `b` [..]: its middle."""
    return (b.double() + 0.5) * -WIDTH


_TEMPER: dict = {}


def _temper(device) -> torch.Tensor:
    """[BINS, len(TAUS)] float64 exp((a - 1) l(b)) of every bin and tempered alternative (a = 1 / tau)."""
    if device not in _TEMPER:
        with torch.inference_mode(False):  # kept between calls, inside inference mode or not
            a = 1 / torch.tensor(TAUS, dtype=torch.float64, device=device)  # [J]
            _TEMPER[device] = ((a - 1) * level(torch.arange(BINS, device=device))[:, None]).exp()
    return _TEMPER[device]


def _binned(p: torch.Tensor, b: torch.Tensor, b_x: torch.Tensor) -> torch.Tensor:
    """[n, len(TAUS) + 1] log q_j(x) / p(x) of the tempered alternatives and the nucleus, token by token: p [n, V]
    float64 (zeros allowed), b [n, V] its bins (`bin_of`), b_x [n] the target's bin. q_a(x) = p(x) exp((a - 1)
    l(x)) / Z_a with Z_a = sum_y p(y) exp((a - 1) l(y)); the nucleus: the bins with less than NUCLEUS in the
    bins before them (whole bins: the cut of NUCLEUS and the rest of the bin where it falls), r = 1 / their mass
    inside, 0 outside. [n, V, len(TAUS)] at once: for short rows (`log_ratios` histograms long ones)."""
    table = _temper(p.device)  # [BINS, J]
    z = torch.bmm(p[:, None], table[b])[:, 0]  # [n, J]
    cols = [table[b_x].log() - z.log()]
    b_sorted, order = b.sort(dim=-1, stable=True)  # [n, V] likeliest bins first
    p_sorted = p.gather(-1, order)
    excl = p_sorted.cumsum(-1) - p_sorted  # [n, V]
    first = torch.ones_like(b_sorted, dtype=torch.bool)
    first[:, 1:] = b_sorted[:, 1:] != b_sorted[:, :-1]  # [n, V] the first token of its bin
    before = torch.where(first, excl, -1.0).cummax(-1).values  # [n, V] the mass of the bins before a token's
    inside = before < NUCLEUS  # [n, V]
    mass = (p_sorted * inside).sum(-1)  # [n]
    before_x = (p * (b < b_x[:, None])).sum(-1)  # [n]
    cols.append(torch.where(before_x < NUCLEUS, -mass.log(), float("-inf"))[:, None])
    return torch.cat(cols, -1)


def _binned_from_histogram(mass: torch.Tensor, b_x: torch.Tensor) -> torch.Tensor:
    """`_binned` from p's mass by bin, mass [n, BINS] float64: the same alternatives, over bins, not tokens (the
    tempered normalisers one matrix product)."""
    table = _temper(mass.device)  # [BINS, J]
    cols = [table[b_x].log() - (mass @ table).log()]  # [n, J]
    inside = (mass.cumsum(-1) - mass) < NUCLEUS  # [n, BINS]
    nucleus = (mass * inside).sum(-1)  # [n]
    cols.append(torch.where(inside.gather(-1, b_x[:, None])[:, 0], -nucleus.log(), float("-inf"))[:, None])
    return torch.cat(cols, -1)


def _mass_by_bin(weights: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[n, BINS] float64 sums of weights [n, V] float64 over each row's bins b [n, V]."""
    return torch.zeros(len(b), BINS, dtype=torch.float64, device=b.device).scatter_add_(1, b, weights)


def _alternatives(p: torch.Tensor, b: torch.Tensor, b_x: torch.Tensor) -> torch.Tensor:
    """`_binned`: token by token up to BINS tokens a row, from the histogram of p's mass by bin above."""
    if p.shape[-1] <= BINS:
        return _binned(p, b, b_x)
    return _binned_from_histogram(_mass_by_bin(p, b), b_x)


def log_ratios(p: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[n, ALTERNATIVES] log q_j(x) / p(x) of each target under each alternative (0 where p(x) = 0, which
    `impossible` counts instead). p [n, V] (float64 is used), targets [n]."""
    p = p.double()  # [n, V]
    p_x = p.gather(-1, targets[:, None])[:, 0]  # [n]
    support = p > 0  # [n, V]
    d = torch.where(support, p.clamp_min(1e-300).log(), float("-inf"))  # [n, V]
    d = (d - d.amax(-1, keepdim=True)).clamp_min(LOW)  # [n, V] log p - log max p
    b = bin_of(d)  # [n, V]
    cols = [_alternatives(p, b, b.gather(-1, targets[:, None])[:, 0])]  # [n, len(TAUS) + 1]
    size = support.sum(-1).double()  # [n] tokens in p's support
    cols.append(torch.log((1 - TAIL) + TAIL / (size * p_x.clamp_min(1e-300)))[:, None])
    out = torch.cat(cols, -1)  # [n, J]
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
            with torch.inference_mode(False):  # a normal tensor, so that calls outside inference mode can write it
                buf = self._bufs[key] = torch.empty(like.numel(), dtype=dtype or like.dtype, device=like.device)
        return buf[:like.numel()].view(like.shape)


def from_logits(z: torch.Tensor, targets: torch.Tensor, ws: Workspace | None = None) -> LogitScores:
    """`log_ratios` and the PIT's inputs for p = softmax(z), z [n, V] the temperature-scaled logits (no top-k or
    top-p cut), without a sort of the vocabulary or a float64 copy of it: the passes over [n, V] are float32 in
    the reused buffers of `ws` (exp of z - max, and sums in blocks: their rounding, about 1e-7, is far below the
    gap between the trainer's logits and the engine's), the per-token math float64. Above BINS tokens the
    tempered and nucleus alternatives come from one histogram of p's mass by bin (a scatter over the vocabulary,
    the rest over BINS), up to it token by token; a target's rank from sums of signs (`_ahead`), ties ordered by
    id as the stable sort of `ranked` orders them."""
    ws = ws or Workspace()
    z = z.float()
    n, V = z.shape
    least, top = z.aminmax(dim=-1)  # [n], [n] one pass for both
    # d: log p - log max p, clamped: below LOW p < 1e-30, and exp under -87 takes the CPU's slow path (underflow)
    d = torch.sub(z, top[:, None], out=ws.get("d", z)).clamp_min_(LOW)  # [n, V]
    e = torch.exp(d, out=ws.get("e", z))  # [n, V] p up to 1 / s
    mask = ws.get("mask", z, torch.bool)  # [n, V]
    s = _sum(e)  # [n]
    log_s = s.log()
    floor = (log_s + SUBNORMAL)[:, None]  # [n, 1] the engine's float32 softmax is 0 at or below it
    support = _support(z, top, least, floor, mask)  # [n] what the engine can sample
    # [n, 1] unclamped: a token the engine cannot draw has p 0
    raw_x = (z.gather(-1, targets[:, None]) - top[:, None]).double()
    p_x = torch.where(raw_x > floor, (raw_x - log_s[:, None]).exp(), 0.0)[:, 0]  # [n]
    buf = ws.get("raw", z)  # [n, V] scratch
    e_x = e.gather(-1, targets[:, None])  # [n, 1]
    b = bin_of(d, ws.get("bins", z, torch.long), buf)  # [n, V]
    b_x = b.gather(-1, targets[:, None])[:, 0]  # [n]
    if V > BINS:  # p's mass by bin, then BINS a row
        weights = ws.get("e64", z, torch.float64).copy_(e)  # [n, V] float64: a bin sums many tokens
        cols = [_binned_from_histogram(_mass_by_bin(weights, b) / s[:, None], b_x)]
    else:
        cols = [_binned(e.double() / s[:, None], b, b_x)]
    ahead_e, tied = _ahead(e, e_x, buf, ws)  # [n] the mass before the target (times s); [n] bool ties
    if bool(tied.any()):  # another token as likely as the target (bf16): those with a lower id are before it
        ids = torch.arange(V, device=z.device)
        low = (e[tied] == e_x[tied]) & (ids < targets[tied, None])  # [t, V]
        ahead_e[tied] += low.count_nonzero(-1).double() * e_x[tied, 0].double()
    before = ahead_e / s  # [n]
    cols.append(torch.log((1 - TAIL) + TAIL / (support * p_x.clamp_min(1e-300)))[:, None])
    log_r = torch.where((p_x > 0)[:, None], torch.cat(cols, -1), 0.0)  # [n, J]
    return LogitScores(log_r, before, p_x, 1.0 / s)


def _support(z: torch.Tensor, top: torch.Tensor, least: torch.Tensor, floor: torch.Tensor, mask: torch.Tensor
             ) -> torch.Tensor:
    """[n] float64 tokens of z [n, V] whose z - top (top, least [n]: each row's max and min) is above `floor`
    [n, 1]: a row whose least token is above it (most) is counted by that alone, without a pass of comparisons."""
    n, V = z.shape
    support = torch.full((n,), float(V), dtype=torch.float64, device=z.device)
    low = (least - top) <= floor[:, 0].float()  # [n] rows with a token the engine cannot draw
    if bool(low.any()):
        m = mask[:int(low.sum())]
        raw = z[low] - top[low, None]  # [k, V]
        support[low] = torch.gt(raw, floor[low].float(), out=m).count_nonzero(-1).double()
    return support


def _ahead(e: torch.Tensor, e_x: torch.Tensor, buf: torch.Tensor, ws: Workspace
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """(the likelier tokens' sum of e [n] float64, [n] bool whether another token is exactly as likely) for e [n, V]
    and the target's e_x [n, 1]. Float passes (sign, clamp, sums) instead of comparisons to bool, which a CPU runs
    several times slower: with diff = e - e_x, the sum of sign(diff) is (likelier - less likely), of sign(max(diff,
    0)) the likelier tokens, of max(diff, 0) their mass less e_x each; the counts are exact integers in float32 (V <
    2^24)."""
    V = e.shape[-1]
    diff = torch.sub(e, e_x, out=buf)  # [n, V]
    sg = torch.sign(diff, out=ws.get("sign", e))  # [n, V]
    net = _sum(sg)  # [n] likelier less less likely
    above = _sum(diff.clamp_min_(0))  # [n] sum of e - e_x over the likelier
    gt = _sum(torch.sign(diff, out=sg))  # [n] the likelier
    ties = V - gt - (gt - net)  # [n] as likely as the target, the target included
    return above + gt * e_x[:, 0].double(), ties.round() > 1
