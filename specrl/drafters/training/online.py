"""Online drafter training: keeps a model drafter (eagle3, draft_model, mtp) aligned with the policy as it trains.

    online = OnlineDrafterTrainer.from_drafter(llm.drafter, policy, DrafterConfig())  # or .from_spec
    policy_trainer.forward_hook = capture = online.forward_hook()  # the trainer's forward hands over the data
    metrics = policy_trainer.step(batch)                           # ... of a sample_fraction share of its rows
    metrics |= online.step(capture.batches, rewards, capture.probe)  # drafter_loss, ..., probe_accept_*
    load_drafter_weights(llm.drafter, online.named_weights(), online.version)   # drafters/weights.py
    online.state_dict() / load_state_dict(...)    # exact resume (weights, AdamW, version, shuffle generator)
    online.save_drafter(ckpt / "drafter")         # the method's own layout: SpecConfig(draft_model=...), export

One `step` = `updates_per_step` AdamW steps on the trainer's own fp32 copy of the drafter, over the captures
of the last `window` RL steps (a replay window: the policy moves a little each step, so recent steps still
teach, and a longer window gives each update more tokens). The policy is read, never trained: its embeddings
and lm_head enter through `FrozenView`. Loss per response position: kl_coef * KL(p || q) + accept_coef *
(1 - sum_x min(p, q)) (losses.py), optionally reward-weighted per GRPO group (ReSpec, with a floor); each
method's terms come from its class's `online_logits`. With `probe_fraction` > 0 the drift probe (probe.py)
scores the drafter before and after its update, and the step-0 drafter, on rows it never trains on.
"""
from __future__ import annotations

import copy
import dataclasses
from collections import deque

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...engine.methods import SCRATCH, SpecConfig, build_drafter, get_method, model_method, trainable_methods
from ...optim import build_optimizer, clip_grad
from ...config.rollout import DrafterConfig
from .capture import Capture, DrafterBatch
from .losses import accepted_mass, forward_kl, restrict_to, reward_weights, weighted_token_mean
from .probe import DriftProbe

Weighted = tuple[DrafterBatch, Tensor | None]  # a captured micro-batch and its rows' reward weights [b]


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


class Quota:
    """A share of a step's rows taken micro-batch by micro-batch: each takes round(share x its rows) with the
    remainder carried to the next, so micro-batches of one row (long rows under a token cap) give the share
    too, not every row; the first micro-batch that can take a row takes at least one."""

    def __init__(self):
        self.credit: dict[str, float] = {}
        self.took: set[str] = set()  # the names that have a row this step

    def take(self, name: str, b: int, share: float, room: int) -> int:
        """How many of a micro-batch's b rows (at most `room`) go to `name`."""
        credit = self.credit.get(name, 0.5) + b * share  # 0.5: a lone micro-batch rounds as round() does
        n = min(room, int(credit))
        if n == 0 and room > 0 and name not in self.took:
            n = 1
        self.credit[name] = credit - n
        if n:
            self.took.add(name)
        return n


class OnlineDrafterTrainer:
    def __init__(self, module: nn.Module, policy: nn.Module, cfg: DrafterConfig, temperature: float = 1.0,
                 seed: int = 0, group_size: int = 1, k: int = 4, pi0: nn.Module | None = None):
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
        self.probe_gen = torch.Generator().manual_seed(seed + 1)  # apart: probing never moves the training rows
        self.version, self.group_size = 0, group_size
        self.quota = Quota()  # the step's shares of rows to train on and to probe, over its micro-batches
        # the captures of the `window` - 1 steps before this one (none held between steps with window 1)
        self.window: deque[list[Weighted]] = deque(maxlen=cfg.window - 1)
        # the step-0 drafter (this module as built) and policy, scored beside the online one
        self.probe = DriftProbe(self, k, pi0) if cfg.probe_fraction > 0 else None

    @classmethod
    def from_drafter(cls, drafter, policy: nn.Module, cfg: DrafterConfig, temperature: float = 1.0,
                     seed: int = 0, group_size: int = 1, k: int = 4,
                     pi0: nn.Module | None = None) -> "OnlineDrafterTrainer":
        """Trains a copy of the engine's drafter module (so its names and shapes fit the swap)."""
        from ..weights import drafter_module
        return cls(copy.deepcopy(drafter_module(drafter)), policy, cfg, temperature, seed, group_size, k, pi0)

    @classmethod
    def from_spec(cls, spec: SpecConfig, policy: nn.Module, cfg: DrafterConfig, temperature: float = 1.0,
                  seed: int = 0, group_size: int = 1, pi0: nn.Module | None = None) -> "OnlineDrafterTrainer":
        """The drafter `spec` names: draft_model='scratch' starts it from the policy (drafters/scratch.py); the
        probe scores drafts of spec.num_speculative_tokens; `pi0`: the base policy, for the probe's KL."""
        method = model_method(spec, "online drafter training")
        k = spec.num_speculative_tokens
        if spec.draft_model == SCRATCH:
            return cls(get_method(method).scratch(policy, seed), policy, cfg, temperature, seed, group_size, k, pi0)
        drafter = build_drafter(dataclasses.replace(spec, method=method), policy, 1,  # "auto": its model drafter
                                policy.config.max_position_embeddings)
        return cls.from_drafter(drafter, policy, cfg, temperature, seed, group_size, k, pi0)

    @property
    def capture_layers(self) -> tuple[int, ...]:
        """The policy layers this drafter reads (-1: the final normed hidden state)."""
        return self.recipe.capture_layers(self.module)

    def forward_hook(self) -> Capture:
        """A hook for `PolicyTrainer.forward_hook`: what this drafter learns from, of `pick_rows`' rows."""
        return Capture(self.capture_layers, self.pick_rows, self.pick_probe if self.probe is not None else None)

    def named_weights(self) -> list[tuple[str, Tensor]]:
        """(name, tensor) pairs for `load_drafter_weights` (detached; the engine copies them in place)."""
        return [(k, v.detach()) for k, v in self.module.state_dict().items()]

    def save_drafter(self, path, dtype: str | None = None):
        """Writes the drafter in its method's own checkpoint layout (`SpecConfig(draft_model=path)` loads it,
        and `specrl export-drafter` reads it from a run's `checkpoints/step_N/drafter/`)."""
        return self.recipe.save(self.module, self.view.policy, path, dtype)

    def state_dict(self) -> dict:
        window = [[{"batch": mb._asdict(), "weights": w} for mb, w in step] for step in self.window]
        return {"method": self.method, "module": self.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                "version": self.version, "generator": self.gen.get_state(), "probe_generator": self.probe_gen.get_state(),
                "window": window, "probe": None if self.probe is None else self.probe.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if state["method"] != self.method:
            raise ValueError(f"drafter trainer state is for method {state['method']!r}, this trainer trains "
                             f"{self.method!r}: resume with the same spec.method")
        self.module.load_state_dict(state["module"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        self.gen.set_state(state["generator"])
        if "probe_generator" in state:
            self.probe_gen.set_state(state["probe_generator"])
        self.window.clear()
        for step in state.get("window", []):
            self.window.append([(batch_from_dict(e["batch"]), e["weights"]) for e in step])
        if self.probe is not None and state.get("probe") is not None:
            self.probe.load_state_dict(state["probe"])

    def step(self, batches: list[DrafterBatch], rewards: Tensor | None = None,
             probe: list[DrafterBatch] | None = None) -> dict[str, float]:
        """`updates_per_step` optimizer steps over the replay window's captured micro-batches, this step's
        added (each update its own share of every micro-batch's rows); `rewards` [N] per trajectory (indexed by
        DrafterBatch.rows) for reward weighting; `probe`: this step's probe rows (capture.py)."""
        if not batches:
            raise ValueError("no captured micro-batches: set PolicyTrainer.forward_hook = "
                             "OnlineDrafterTrainer.forward_hook() before PolicyTrainer.step")
        weights = None
        if self.cfg.reward_weighting and rewards is not None:
            weights = reward_weights(rewards, self.group_size, self.cfg.reward_w_floor, self.cfg.reward_w_max)  # [N]
        now = [(mb, None if weights is None else weights[mb.rows].to(mb.mask.device)) for mb in batches]
        probed = self.probe.before(probe) if self.probe is not None and probe else {}
        u = self.cfg.updates_per_step
        captured = [item for step in self.window for item in step] + now
        shares: list[list[Weighted]] = [captured]
        if u > 1:  # update j trains on the j-th of u random slices of every micro-batch's rows
            shares = [[] for _ in range(u)]
            for mb, w in captured:
                for j, part in enumerate(torch.randperm(len(mb.rows), generator=self.gen).chunk(u)):
                    shares[j].append((mb.select(part), None if w is None else w[part.to(w.device)]))
            shares = [share for share in shares if share]
        sums = {"drafter_loss": 0.0, "drafter_kl": 0.0, "drafter_accept_mass": 0.0, "drafter_grad_norm": 0.0}
        for share in shares:
            self._update(share, sums)
        self.version += 1
        self.quota = Quota()
        self.window.append(now)  # dropped at once with window 1 (maxlen 0)
        if probed:
            probed.update(self.probe.after(probe))
            probed["probe_lag"] = probed["probe_accept_newest"] - probed["probe_accept_online"]
        return {**{k: v / len(shares) for k, v in sums.items()}, "drafter_version": self.version,
                "drafter_window_rows": sum(len(mb.rows) for mb, _ in captured), **probed}

    def _update(self, batches: list[Weighted], sums: dict) -> None:
        denom = sum(mb.num_tokens for mb, _ in batches) or 1.0
        self.optimizer.zero_grad(set_to_none=True)
        for mb, row_w in batches:
            loss, kl, mass = self.loss(mb, row_w, denom)
            loss.backward()
            sums["drafter_loss"] += float(loss.detach())
            sums["drafter_kl"] += kl
            sums["drafter_accept_mass"] += mass
        sums["drafter_grad_norm"] += clip_grad(self.module, self.cfg.optim.grad_clip)
        self.optimizer.step()

    def pick_rows(self, b: int) -> Tensor | None:
        """The rows `forward_hook` keeps: a `sample_fraction` share of the step's rows (at least one), drawn
        from each micro-batch of b rows as it comes; None keeps them all. The n samples of a prompt are near
        duplicates at a low-entropy policy, so a share of them teaches almost as much as all of them, at that
        share of the cost and memory."""
        if self.cfg.sample_fraction >= 1:
            return None
        return torch.randperm(b, generator=self.gen)[:self.quota.take("train", b, self.cfg.sample_fraction, b)]

    def pick_probe(self, b: int, kept: Tensor | None) -> Tensor | None:
        """The probe's rows of a micro-batch: a `probe_fraction` share of the step's rows (at least one while
        any is left), from the b rows `pick_rows` did not keep, so no drafter is scored on rows it trained
        on; None: none here."""
        if kept is None:
            return None
        free = torch.ones(b, dtype=torch.bool)
        free[kept.cpu()] = False
        rest = free.nonzero().flatten()  # [b - kept]
        n = self.quota.take("probe", b, self.cfg.probe_fraction, len(rest))
        if not n:
            return None
        return rest[torch.randperm(len(rest), generator=self.probe_gen)[:n]]

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


def batch_from_dict(d: dict) -> DrafterBatch:
    """A DrafterBatch from its `_asdict()` as a state file gives it back (layer keys may come back as strings)."""
    return DrafterBatch(**{**d, "hidden": {int(k): v for k, v in d["hidden"].items()}})
