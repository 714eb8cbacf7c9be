"""The audit of a file of completions from any engine: one e-process over its tokens, row by row in order."""
from __future__ import annotations

import math

import torch

from .bets import log_bets, log_mixture
from .eprocess import SCORES, step_evidence
from .scorer import TokenScorer, score_completions


def running_log_e(scores: torch.Tensor) -> torch.Tensor:
    """[n] the e-process's log value after each token of `scores` [n, COLUMNS] (inf from an impossible one)."""
    possible = scores[:, 2] == 0  # [n]
    bets = log_bets(scores[:, SCORES:]) * possible[:, None]  # [n, COMPONENTS] an impossible token bets nothing
    log_e = log_mixture(bets.cumsum(0))  # [n]
    return torch.where(possible.logical_not().cumsum(0) > 0, math.inf, log_e)


def audit_completions(model, prompts: list[list[int]], completions: list[list[int]], temperature: float,
                      top_p: float = 1.0, top_k: int = -1, seed: int = 0, alpha: float = 1e-3
                      ) -> tuple[dict, torch.Tensor]:
    """(the audit's summary, the running log e-value [n]) of these completions under `model` at these sampling
    settings. `p_value` is 1 / the e-process's running maximum: the smallest alpha it rejects at, valid
    whenever the file is looked at (Ville) when the rows are independent draws (no seed shared across
    prompts)."""
    scores = score_completions(model, TokenScorer(temperature, top_p, top_k, seed), prompts, completions)
    ev = step_evidence(scores)
    path = running_log_e(scores)  # [n]
    peak = float(path.max()) if len(path) else 0.0
    p_value = math.exp(-max(peak, 0.0))
    log_e = float(path[-1]) if len(path) else 0.0
    u = scores[:, 0]
    out = {"test": "e_process", "log_e": log_e, "e_value": math.exp(log_e) if log_e < 709 else math.inf,
           "p_value": p_value, "alpha": alpha, "rejected": p_value <= alpha, "tokens": ev.tokens,
           "impossible": ev.impossible, "z": ev.z, "pit_p": ev.pit_p, "weight": ev.weight,
           "pit_top5": float((u > 0.95).double().mean()), "pit_bottom5": float((u < 0.05).double().mean())}
    return out, path
