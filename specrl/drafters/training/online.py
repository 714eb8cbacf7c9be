"""Online drafter training: keeps a model drafter (eagle3, draft_model, mtp) aligned with the policy as it trains.

    online = OnlineDrafterTrainer.from_drafter(llm.drafter, policy, DrafterConfig())  # or .from_spec
    policy_trainer.forward_hook = capture = online.forward_hook()  # the trainer's forward hands over the data
    metrics = policy_trainer.step(batch)                           # ... of a sample_fraction share of its rows
    metrics |= online.step(capture.batches, rewards)               # drafter_loss, drafter_kl, ...
    load_drafter_weights(llm.drafter, online.named_weights(), online.version)   # drafters/weights.py
    online.state_dict() / load_state_dict(...)    # exact resume (weights, AdamW, version, shuffle generator)
    online.save_drafter(ckpt / "drafter")         # the method's own layout: SpecConfig(draft_model=...), export

One `step` = `updates_per_step` AdamW steps on the trainer's own fp32 copy of the drafter. The policy is read,
never trained: its embeddings and lm_head enter through `FrozenView`. Loss per response position:
kl_coef * KL(p || q) + accept_coef * (1 - sum_x min(p, q)) (losses.py), optionally reward-weighted (ReSpec);
each method's terms come from its class's `online_logits`.
"""
from __future__ import annotations

import copy
import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...engine.methods import SCRATCH, SpecConfig, build_drafter, get_method, model_method, trainable_methods
from ...optim import build_optimizer, clip_grad
from ...config.rollout import DrafterConfig
from .capture import Capture, DrafterBatch
from .losses import accepted_mass, forward_kl, restrict_to, reward_weights, weighted_token_mean


class FrozenView:
    """The policy's embeddings and lm_head as detached functions: the drafter's loss never trains the policy."""

    def __init__(self, policy: nn.Module):
        self.policy = policy

    def embed(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.policy.model.embed_tokens.weight.detach())  # [B, T, D]

    def lm_head_logits(self, h: Tensor) -> Tensor:
        return F.linear(h, self.policy.lm_head.weight.detach())  # [B, T, V]

    lm_head = lm_head_logits  # MTPStack.logits calls lm_head(x)


def method_of(module: nn.Module) -> str:
    """The model method whose drafters draft with a module of this class (its class's `module_class`)."""
    for method in trainable_methods():
        if isinstance(module, get_method(method).module_class):
            return method
    raise TypeError(f"{type(module).__name__} is not a drafter module: expected the module of one of "
                    f"{list(trainable_methods())}")


class OnlineDrafterTrainer:
    def __init__(self, module: nn.Module, policy: nn.Module, cfg: DrafterConfig, temperature: float = 1.0,
                 seed: int = 0):
        cfg.validate()
        if temperature <= 0:
            raise ValueError(f"online drafter temperature={temperature}: expected > 0 (the rollouts' sampling "
                             "temperature; for greedy rollouts train at 1.0)")
        self.method, self.cfg, self.view = method_of(module), cfg, FrozenView(policy)
        self.recipe = get_method(self.method)  # the method's own parts (drafters/<method>/method.py)
        self.temperature = temperature
        p = next(policy.parameters())
        self.module = module.to(device=p.device, dtype=torch.float32).train().requires_grad_(True)
        self.optimizer = build_optimizer(self.module, cfg.optim)
        self.gen = torch.Generator().manual_seed(seed)
        self.version = 0

    @classmethod
    def from_drafter(cls, drafter, policy: nn.Module, cfg: DrafterConfig, temperature: float = 1.0,
                     seed: int = 0) -> "OnlineDrafterTrainer":
        """Trains a copy of the engine's drafter module (so its names and shapes fit the swap)."""
        from ..weights import drafter_module
        return cls(copy.deepcopy(drafter_module(drafter)), policy, cfg, temperature, seed)

    @classmethod
    def from_spec(cls, spec: SpecConfig, policy: nn.Module, cfg: DrafterConfig, temperature: float = 1.0,
                  seed: int = 0) -> "OnlineDrafterTrainer":
        """The drafter `spec` names: draft_model='scratch' starts it from the policy (drafters/scratch.py)."""
        method = model_method(spec, "online drafter training")
        if spec.draft_model == SCRATCH:
            return cls(get_method(method).scratch(policy, seed), policy, cfg, temperature, seed)
        drafter = build_drafter(dataclasses.replace(spec, method=method), policy, 1,  # "auto": its model drafter
                                policy.config.max_position_embeddings)
        return cls.from_drafter(drafter, policy, cfg, temperature, seed)

    @property
    def capture_layers(self) -> tuple[int, ...]:
        """The policy layers this drafter reads (-1: the final normed hidden state)."""
        return self.recipe.capture_layers(self.module)

    def forward_hook(self) -> Capture:
        """A hook for `PolicyTrainer.forward_hook`: what this drafter learns from, of `pick_rows`' rows."""
        return Capture(self.capture_layers, self.pick_rows)

    def named_weights(self) -> list[tuple[str, Tensor]]:
        """(name, tensor) pairs for `load_drafter_weights` (detached; the engine copies them in place)."""
        return [(k, v.detach()) for k, v in self.module.state_dict().items()]

    def save_drafter(self, path, dtype: str | None = None):
        """Writes the drafter in its method's own checkpoint layout (`SpecConfig(draft_model=path)` loads it,
        and `specrl export-drafter` reads it from a run's `checkpoints/step_N/drafter/`)."""
        return self.recipe.save(self.module, self.view.policy, path, dtype)

    def state_dict(self) -> dict:
        return {"method": self.method, "module": self.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                "version": self.version, "generator": self.gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        if state["method"] != self.method:
            raise ValueError(f"drafter trainer state is for method {state['method']!r}, this trainer trains "
                             f"{self.method!r}: resume with the same spec.method")
        self.module.load_state_dict(state["module"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        self.gen.set_state(state["generator"])

    def step(self, batches: list[DrafterBatch], rewards: Tensor | None = None) -> dict[str, float]:
        """`updates_per_step` optimizer steps over one RL step's captured micro-batches (each update its own
        share of every micro-batch's rows); `rewards` [N] per trajectory (indexed by DrafterBatch.rows) for
        reward weighting."""
        if not batches:
            raise ValueError("no captured micro-batches: set PolicyTrainer.forward_hook = "
                             "OnlineDrafterTrainer.forward_hook() before PolicyTrainer.step")
        weights = None
        if self.cfg.reward_weighting and rewards is not None:
            weights = reward_weights(rewards, 0.0, self.cfg.reward_w_max)  # [N]
        u = self.cfg.updates_per_step
        shares: list[list[DrafterBatch]] = [batches]
        if u > 1:  # update j trains on the j-th of u random slices of every micro-batch's rows
            shares = [[] for _ in range(u)]
            for mb in batches:
                for j, part in enumerate(torch.randperm(len(mb.rows), generator=self.gen).chunk(u)):
                    shares[j].append(mb.select(part))
            shares = [share for share in shares if share]
        sums = {"drafter_loss": 0.0, "drafter_kl": 0.0, "drafter_accept_mass": 0.0, "drafter_grad_norm": 0.0}
        for share in shares:
            self._update(share, weights, sums)
        self.version += 1
        return {**{k: v / len(shares) for k, v in sums.items()}, "drafter_version": self.version}

    def _update(self, batches: list[DrafterBatch], weights: Tensor | None, sums: dict) -> None:
        denom = sum(b.num_tokens for b in batches) or 1.0
        self.optimizer.zero_grad(set_to_none=True)
        for mb in batches:
            row_w = weights[mb.rows].to(mb.mask.device) if weights is not None else None  # [b]
            loss, kl, mass = self.loss(mb, row_w, denom)
            loss.backward()
            sums["drafter_loss"] += float(loss.detach())
            sums["drafter_kl"] += kl
            sums["drafter_accept_mass"] += mass
        sums["drafter_grad_norm"] += clip_grad(self.module, self.cfg.optim.grad_clip)
        self.optimizer.step()

    def pick_rows(self, b: int) -> Tensor | None:
        """The rows `forward_hook` keeps: a `sample_fraction` share (at least one) of a micro-batch's b rows;
        None keeps them all. The n samples of a prompt are near duplicates at a low-entropy policy, so a share
        of them teaches almost as much as all of them, at that share of the cost and memory."""
        if self.cfg.sample_fraction >= 1:
            return None
        return torch.randperm(b, generator=self.gen)[:max(1, round(b * self.cfg.sample_fraction))]

    def loss(self, mb: DrafterBatch, row_w: Tensor | None, denom: float) -> tuple[Tensor, float, float]:
        """This micro-batch's share of the update's loss, and its first-draft KL and accepted mass sums."""
        # per term of the method's loss: (weight, draft logits [b, t, Vd], policy logits [b, t, V], mask [b, t])
        terms = self.recipe.online_logits(self, mb)
        ids = self.recipe.draft_ids(self.module)
        total, kl0, mass0 = 0.0, 0.0, 0.0
        trained = self.cfg.accept_coef > 0  # the accepted-mass term is in the loss (else only a metric)
        for i, (w, draft, policy, mask) in enumerate(terms):
            kl = forward_kl(draft, restrict_to(policy, ids), self.temperature)  # [b, t]
            tok = self.cfg.kl_coef * kl  # [b, t]
            if trained or i == 0:  # the loss term, or only the first draft's metric (then without a graph)
                with torch.set_grad_enabled(trained and torch.is_grad_enabled()):
                    p_full = torch.softmax(policy.float() / self.temperature, dim=-1)  # [b, t, V]
                    mass = accepted_mass(draft, policy, self.temperature, restrict_to(p_full, ids))  # [b, t]
                if trained:
                    tok = tok + self.cfg.accept_coef * (1.0 - mass)
            total = total + w * weighted_token_mean(tok, mask, row_w, denom)
            if i == 0:
                kl0 = float(weighted_token_mean(kl.detach(), mask, None, denom))
                mass0 = float(weighted_token_mean(mass.detach(), mask, None, denom))
        return total, kl0, mass0
