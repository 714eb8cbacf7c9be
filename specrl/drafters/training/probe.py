"""The drift probe: how well a drafter would serve the policy's own rollouts, and how far the policy moved.

Each RL step the policy trainer's forward hands over, besides the rows the drafter learns from, a disjoint
share of probe rows (`rollout.drafter.probe_fraction`, capture.py). On those same positions the probe scores
side by side (paired: the same tokens, the same policy distribution p):

    probe_accept_online   the online drafter before this step's update: the one that served this rollout
                          (sync; in async, drafter_served in the row says which version did)
    probe_accept_newest   the online drafter after this step's update (trained on the other rows of the same
                          rollout): what the next rollout would get without the one-version lag
    probe_accept_frozen   a frozen copy of the step-0 drafter, fed the current policy's hidden states
    probe_kl_pi0          KL(pi_t || pi_0) per response token, pi_0 the base policy (a kept copy, one forward
                          of the probe rows a step)

Expected accepted tokens of a k-token draft under rejection sampling. The drafter's depth-i draft at index t
(its chain after t, as the method's training unroll gives it: EAGLE-3's training-time-test steps, MTP's
depths, a draft model teacher-forced) is accepted with probability a_{t,i} = sum_x min(p(x), q(x)), given the
earlier ones were. The chain stops at the first rejection, so

    E_k(t) = sum_{j=1..k} prod_{i=1..j} a_{t,i}      in [0, k]; the bonus token is not counted,

averaged over the indices t whose k drafted tokens all lie inside the response (so a drafter equal to the
policy scores exactly k). Depths the method does not unroll (a draft model's one term) take the last term's
mass at the later index (teacher-forced). p and q are at the rollout temperature, as the verifier compares
them; the KL too.
"""
from __future__ import annotations

import copy
import dataclasses
from types import SimpleNamespace

import torch
from torch import Tensor, nn

from .capture import DrafterBatch
from .losses import accepted_mass, restrict_to


def expected_accepted(alpha: Tensor, valid: Tensor) -> tuple[float, int]:
    """alpha [b, W, k] depth-wise acceptance probabilities, valid [b, W] bool -> (sum over valid indices of
    sum_j prod_{i<=j} alpha_i, how many indices)."""
    per_index = torch.cumprod(alpha.clamp(0.0, 1.0), dim=-1).sum(-1)  # [b, W]
    return float(per_index[valid].sum()), int(valid.sum())


def shift_left(x: Tensor, n: int) -> Tensor:
    """x[:, t] <- x[:, t+n], zero past the end. x: [b, W]."""
    return torch.cat([x[:, n:], torch.zeros_like(x[:, :n])], dim=1) if n else x


def chain(terms: list, k: int, temperature: float, ids: Tensor | None) -> tuple[Tensor, Tensor]:
    """A method's `online_logits` terms (weight, draft [b, W_i, Vd], policy [b, W_i, V], mask [b, W_i]) ->
    alpha [b, W, k] and valid [b, W]: the depth-i acceptance probability at each index, and whether all k
    drafted tokens are response tokens. Terms are cut to the shortest (MTP's depth d has T - d indices)."""
    W = min(t[1].shape[1] for t in terms)
    masses, masks = [], []
    for _, draft, policy, mask in terms:
        p_full = torch.softmax(policy[:, :W].float() / temperature, dim=-1)  # [b, W, V]
        masses.append(accepted_mass(draft[:, :W], policy[:, :W], temperature, restrict_to(p_full, ids)))  # [b, W]
        masks.append(mask[:, :W].float())
    extra = k - len(masses)
    for n in range(1, extra + 1):  # teacher-forced: the last depth's mass at the next indices
        masses.append(shift_left(masses[len(terms) - 1], n))
        masks.append(shift_left(masks[len(terms) - 1], n))
    alpha = torch.stack(masses[:k], dim=-1)  # [b, W, k]
    valid = torch.stack(masks[:k], dim=-1).bool().all(-1)  # [b, W]
    return alpha, valid


def kl_to(logits: Tensor, ref_logits: Tensor, mask: Tensor, temperature: float) -> tuple[float, float]:
    """(sum over mask of KL(p || p_ref) per position, the mask's count). logits, ref_logits: [b, T, V]."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)  # [b, T, V]
    logr = torch.log_softmax(ref_logits.float() / temperature, dim=-1)  # [b, T, V]
    kl = (logp.exp() * (logp - logr)).sum(-1).clamp(min=0.0)  # [b, T]
    return float((kl * mask).sum()), float(mask.sum())


class DriftProbe:
    """Holds the step-0 drafter and the step-0 policy; `score` runs a drafter over the probe rows."""

    def __init__(self, trainer, k: int, pi0: nn.Module | None = None):
        self.k, self.trainer = k, trainer
        self.frozen = copy.deepcopy(trainer.module).eval().requires_grad_(False)  # [the step-0 drafter]
        self.pi0 = None if pi0 is None else pi0.eval().requires_grad_(False)
        # the method's unroll, k deep, so that every scored depth is the drafter's own
        self.cfg = dataclasses.replace(trainer.cfg, ttt_steps=max(k, 1), mtp_depths=max(k, 1))

    @torch.no_grad()
    def accept(self, module: nn.Module, batches: list[DrafterBatch]) -> float:
        """Mean expected accepted tokens of `module`'s k-token drafts over the probe rows' indices."""
        view = SimpleNamespace(module=module, view=self.trainer.view, cfg=self.cfg)
        ids = self.trainer.recipe.draft_ids(module)
        total, count = 0.0, 0
        for mb in batches:
            alpha, valid = chain(self.trainer.recipe.online_logits(view, mb), self.k, self.trainer.temperature, ids)
            s, n = expected_accepted(alpha, valid)
            total, count = total + s, count + n
        return total / count if count else float("nan")

    @torch.no_grad()
    def kl_pi0(self, batches: list[DrafterBatch]) -> float:
        """KL(pi_t || pi_0) per response token of the probe rows (pi_t: the captured logits)."""
        if self.pi0 is None:
            return float("nan")
        total, count = 0.0, 0.0
        for mb in batches:
            ref = self.pi0(mb.input_ids.to(next(self.pi0.parameters()).device)).logits  # [b, T, V]
            s, n = kl_to(mb.logits, ref.to(mb.logits.device), mb.mask, self.trainer.temperature)
            total, count = total + s, count + n
        return total / count if count else float("nan")

    def before(self, batches: list[DrafterBatch]) -> dict[str, float]:
        """The served (pre-update) and frozen drafters and the policy's KL, on this step's probe rows."""
        if not batches:
            return {}
        return {"probe_accept_online": self.accept(self.trainer.module, batches),
                "probe_accept_frozen": self.accept(self.frozen, batches), "probe_kl_pi0": self.kl_pi0(batches),
                "probe_positions": float(sum(b.num_tokens for b in batches))}

    def after(self, batches: list[DrafterBatch]) -> dict[str, float]:
        """The updated drafter on the same rows: probe_lag = newest - online is what the one-version lag costs."""
        if not batches:
            return {}
        return {"probe_accept_newest": self.accept(self.trainer.module, batches)}

    def state_dict(self) -> dict:
        return {"frozen": self.frozen.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.frozen.load_state_dict(state["frozen"])
