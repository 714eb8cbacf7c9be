"""Acceptance model of speculative decoding: per-position acceptance, and how many verify steps a
sequence needs to emit a given number of tokens."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

EXACT_SAMPLE_BUDGET = 300_000  # tokens; above this, step counts come from the renewal CLT


@dataclass(frozen=True)
class AcceptanceModel:
    """alphas[p] = P(draft p+1 accepted | drafts 1..p accepted), p = 0..k-1."""

    alphas: tuple[float, ...]

    def __post_init__(self):
        if not self.alphas or any(not 0.0 <= a <= 1.0 for a in self.alphas):
            raise ValueError(f"acceptance per position must be k>=1 values in [0, 1], got "
                             f"{self.alphas}; pass e.g. --acceptance 0.9,0.8,0.7")

    @property
    def k(self) -> int:
        return len(self.alphas)

    @property
    def pmf(self) -> np.ndarray:
        """P(emitted = 1 + a) for a accepted drafts, a = 0..k (the +1 is the bonus/correction)."""
        survive = np.concatenate([[1.0], np.cumprod(self.alphas)])  # [k+1] P(a >= p)
        return survive - np.concatenate([survive[1:], [0.0]])  # [k+1]

    @property
    def mean_emitted(self) -> float:
        """Acceptance length tau: tokens emitted per verify step."""
        return float(np.dot(self.pmf, np.arange(1, self.k + 2)))

    @property
    def var_emitted(self) -> float:
        e = np.arange(1, self.k + 2)
        return float(np.dot(self.pmf, e * e) - self.mean_emitted ** 2)

    def steps_needed(self, tokens: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Verify steps each sequence needs to emit `tokens` [N]; the last step may be cut short
        (a lossless engine stops at exactly the same length as without SD)."""
        tokens = np.asarray(tokens, dtype=np.int64)  # [N]
        if tokens.sum() <= EXACT_SAMPLE_BUDGET:
            return _exact_steps(tokens, np.cumsum(self.pmf), rng)
        return _clt_steps(tokens, self.mean_emitted, self.var_emitted, self.k, rng)


def geometric(alpha: float, k: int) -> AcceptanceModel:
    return AcceptanceModel(tuple([float(alpha)] * k))


def from_acceptance_length(tau: float, k: int) -> AcceptanceModel:
    """Geometric model whose mean tokens per verify step is tau (1 <= tau <= k+1)."""
    if not 1.0 <= tau <= k + 1:
        raise ValueError(f"acceptance length {tau} impossible with k={k}; expected 1 <= tau <= k+1")
    lo, hi = 0.0, 1.0
    for _ in range(60):  # bisection: tau is increasing in alpha
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if geometric(mid, k).mean_emitted < tau else (lo, mid)
    return geometric((lo + hi) / 2, k)


@dataclass(frozen=True)
class LengthAcceptance:
    """Acceptance that depends on the response: tau(L) = c0 + c1 ln L tokens per verify step, clipped to
    [1, k+1]. On a task whose long answers repeat their own pattern, long responses (the ones that set
    the tail) accept more than the average. Fitted per method and k from traces (`fit_length_acceptance`)."""

    c0: float
    c1: float
    k: int
    buckets: int = 8  # sequences are grouped into this many tau quantiles for sampling

    def tau(self, lengths: np.ndarray) -> np.ndarray:
        lengths = np.maximum(np.asarray(lengths, dtype=np.float64), 1.0)  # [N]
        return np.clip(self.c0 + self.c1 * np.log(lengths), 1.0, self.k + 1.0)  # [N]

    def steps_needed(self, tokens: np.ndarray, lengths: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Like AcceptanceModel.steps_needed, each sequence with the geometric model of its own tau."""
        tokens = np.asarray(tokens, dtype=np.int64)  # [N]
        tau = self.tau(lengths)  # [N]
        edges = np.quantile(tau, np.linspace(0, 1, self.buckets + 1)[1:-1])  # [B-1]
        group = np.searchsorted(edges, tau, side="right")  # [N]
        steps = np.zeros_like(tokens)
        for g in np.unique(group):
            idx = np.flatnonzero(group == g)
            model = from_acceptance_length(float(tau[idx].mean()), self.k)
            steps[idx] = model.steps_needed(tokens[idx], rng)
        return steps


@dataclass(frozen=True)
class BatchAcceptance:
    """SD whose draft length and acceptance depend on how many sequences run, as under the adaptive
    strategy "auto" (SD off above its max batch, k shrinking as the batch grows). Entry n-1 is for n
    running sequences (the last entry holds for larger batches): `k` the rule's draft length (0: plain
    decode), `drafts` the draft slots verified per sequence (the engine pads to the batch's longest
    proposal; a suffix drafter without a match proposes fewer than k) and `accepted` the drafts accepted
    per sequence, both means measured on traces. The sequences still running when few run are the long
    ones, which repeat their pattern and accept more."""

    k: tuple[int, ...]
    drafts: tuple[float, ...]
    accepted: tuple[float, ...]

    def __post_init__(self):
        bad = [i + 1 for i, (k, d, a) in enumerate(zip(self.k, self.drafts, self.accepted))
               if not 0.0 <= a <= d <= max(k, 0)]
        if not self.k or len({len(self.k), len(self.drafts), len(self.accepted)}) > 1 or bad:
            raise ValueError(f"batch acceptance needs equal-length k, drafts, accepted with 0 <= accepted <= "
                             f"drafts <= k per batch size; bad at batch sizes {bad}")

    def index(self, n: int) -> int:
        return min(max(n, 1), len(self.k)) - 1

    @cached_property
    def _cdfs(self) -> list[np.ndarray | None]:
        """Per batch size, the cdf of accepted drafts per sequence (geometric over the rule's k positions)."""
        return [None if k == 0 else np.cumsum(from_acceptance_length(1.0 + a, k).pmf)
                for k, a in zip(self.k, self.accepted)]

    def sample_accepted(self, n: int, size: int, rng: np.random.Generator) -> np.ndarray:
        """Accepted drafts [size] of each of `size` sequences in one step of a batch of n."""
        cdf = self._cdfs[self.index(n)]
        if cdf is None:
            return np.zeros(size, dtype=np.int64)
        return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), cdf.size - 1)  # [size]

    @property
    def mean_emitted(self) -> float:
        """Tokens per verify step, averaged over the batch sizes that speculate (for reports)."""
        on = [a for k, a in zip(self.k, self.accepted) if k > 0]
        return 1.0 + float(np.mean(on)) if on else 1.0


def traced_k_rule(rows: list[dict]) -> tuple[Callable[[int], int], int]:
    """The draft length an adaptive engine ("auto") chose per running count, read off its trace: at n running,
    the mean longest draft (`k`) of its verify steps, rounded, or 0 where most of its steps at n drafted
    nothing. A count the trace never saw takes the nearest one it did (the smaller on a tie). Returns the
    rule and the largest count seen."""
    seen: dict[int, list[float]] = {}  # n -> [steps, verify steps, sum of k over verify steps]
    for r in rows:
        n = int(r.get("active", 0))
        if n < 1 or r.get("phase") not in ("spec", "decode"):
            continue
        c = seen.setdefault(n, [0.0, 0.0, 0.0])
        c[0] += 1
        if r.get("phase") == "spec" and int(r.get("k", 0)) > 0:
            c[1] += 1
            c[2] += int(r["k"])
    if not seen:
        raise ValueError("the trace has no decode or verify steps to read the adaptive engine's choices from")
    rule = {n: (round(c[2] / c[1]) if c[1] * 2 >= c[0] else 0) for n, c in seen.items()}
    known = sorted(rule)

    def k_rule(n: int) -> int:
        if n in rule:
            return rule[n]
        return rule[min(known, key=lambda m: (abs(m - n), m))]

    return k_rule, known[-1]


def fit_batch_acceptance(rows: list[dict], k_rule: Callable[[int], int], n_max: int) -> BatchAcceptance:
    """Drafts and acceptance per running count n = 1..n_max+1 from engine-trace rows of SD steps. Batch
    sizes are pooled by (rule k, octave of n) so that rarely seen sizes borrow from their neighbours; a
    bin without data takes the pool of its k, then of all drafting steps."""
    sums: dict[tuple, np.ndarray] = {}  # bin -> [sequence-steps, drafts, accepted]
    for r in rows:
        n = int(r["active"])
        drafts = float(r["tokens_in"]) - n
        if r.get("phase") != "spec" or n < 1 or k_rule(n) == 0 or drafts < 0:
            continue
        for key in ((k_rule(n), n.bit_length()), (k_rule(n),), ()):
            sums.setdefault(key, np.zeros(3))
            sums[key] += (n, drafts, float(r["accepted_tokens"]))
    ks, drafts, accepted = [], [], []
    for n in range(1, n_max + 2):
        k = k_rule(n)
        pool = next((sums[key] for key in ((k, n.bit_length()), (k,), ()) if key in sums), None)
        if k == 0 or pool is None:
            ks.append(k)
            drafts.append(0.0)
            accepted.append(0.0)
            continue
        d = min(pool[1] / pool[0], float(k))
        ks.append(k)
        drafts.append(d)
        accepted.append(min(pool[2] / pool[0], d))
    return BatchAcceptance(tuple(ks), tuple(drafts), tuple(accepted))


def sequence_steps(response_lens, spec_active) -> tuple[np.ndarray, np.ndarray]:
    """Per-sequence (length, SD verify steps) of one generate() call without queueing. The trace gives
    the active count of every SD step; a_j sequences took more than j steps, so the r-th most stepped
    sequence took #{j : a_j > r} steps. Steps and lengths are paired by rank (longest with most)."""
    lens = np.sort(np.asarray(response_lens, dtype=np.int64))[::-1]  # [S]
    active = np.sort(np.asarray(spec_active, dtype=np.int64))  # [J]
    steps = active.size - np.searchsorted(active, np.arange(lens.size), side="right")  # [S], descending
    return lens, steps


def fit_length_acceptance(lengths: np.ndarray, steps: np.ndarray, k: int) -> LengthAcceptance | None:
    """Least squares of each sequence's tokens per step, (L - 1) / steps (the prefill emits the first
    token), on ln L, weighted by steps. None when the lengths do not vary enough to fit a slope."""
    lengths, steps = np.asarray(lengths, dtype=np.float64), np.asarray(steps, dtype=np.float64)
    ok = (steps > 0) & (lengths > 1)
    if ok.sum() < 4 or np.ptp(np.log(lengths[ok])) < 0.5:
        return None
    x, y, w = np.log(lengths[ok]), (lengths[ok] - 1) / steps[ok], steps[ok]
    a = np.stack([np.ones_like(x), x], 1) * np.sqrt(w)[:, None]  # [S, 2]
    c0, c1 = np.linalg.lstsq(a, y * np.sqrt(w), rcond=None)[0]
    return LengthAcceptance(float(c0), float(c1), k)


def _exact_steps(tokens: np.ndarray, cdf: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    steps = np.zeros_like(tokens)  # [N]
    left = tokens.copy()
    idx = np.flatnonzero(left > 0)
    while idx.size:
        chunk = int(min(512, max(8, left[idx].max())))
        u = rng.random((idx.size, chunk))  # [n, chunk]
        emitted = np.minimum(np.searchsorted(cdf, u, side="right"), cdf.size - 1) + 1  # [n, chunk]
        cs = np.cumsum(emitted, axis=1)  # [n, chunk]
        hit = cs >= left[idx, None]  # [n, chunk]
        done = hit[:, -1]
        steps[idx[done]] += hit[done].argmax(axis=1) + 1
        steps[idx[~done]] += chunk
        left[idx[~done]] -= cs[~done, -1]
        idx = idx[~done]
    return steps


def _clt_steps(tokens, mu, var, k, rng) -> np.ndarray:
    """Renewal CLT: steps to reach L tokens ~ Normal(L/mu, L var / mu^3)."""
    z = rng.standard_normal(tokens.shape)  # [N]
    n = np.ceil(tokens / mu + z * np.sqrt(tokens * var / mu ** 3))
    lo = np.ceil(tokens / (k + 1))
    return np.clip(n, lo, tokens).astype(np.int64)


def fit_geometric(accepted: np.ndarray, seqs: np.ndarray, k: int) -> AcceptanceModel:
    """Geometric alpha whose mean accepted drafts per sequence per step matches a trace."""
    mean_acc = float(np.sum(accepted) / max(np.sum(seqs), 1))  # E[a] = tau - 1
    return from_acceptance_length(min(1.0 + mean_acc, k + 1.0), k)
