"""Builds (target, SpecConfig) for each method on a tiny random target.

Model-based drafters are random too, except `draft_model`, which is the target's own weights (so the accept
path runs often) in a one-layer-shorter copy, and `mtp`, whose modules are random on top of the target.
"""
from __future__ import annotations

import json
from dataclasses import replace

import torch

from specrl.engine.methods import SpecConfig
from specrl.model import CausalLM, save_model


def _ngram(model, tmp_path):
    return model, SpecConfig(method="ngram", num_speculative_tokens=4, options={"ngram": {"min": 1}})


def _suffix(model, tmp_path):
    return model, SpecConfig(method="suffix", num_speculative_tokens=4, options={"suffix": {"min": 1}})


def _auto(model, tmp_path):
    """The adaptive engine over a point drafter pair and a random EAGLE-3 head (drafts with q), deterministic,
    with a cost profile under which drafting always pays: every step mixes drafters in one verify."""
    _, eagle = _eagle3(model, tmp_path)
    profile = tmp_path / "cheap_drafts.json"
    if not profile.exists():
        from specrl.engine.adaptive.cost_model import CostModel
        cost = CostModel(model.config.num_params, {"suffix": 0, "ngram": 0, "eagle3": 0}, deterministic=True)
        cost.target.set_prior([1.0, 1e-6, 0.0, 0.0])  # a forward costs the same whatever it verifies
        profile.write_text(json.dumps(cost.state_dict()))
    return model, SpecConfig(method="auto", num_speculative_tokens=4, draft_model=eagle.draft_model,
                             options={"ngram": {"min": 1}, "suffix": {"min": 1},
                                      "auto": {"drafters": ("suffix", "ngram", "eagle3"), "mode": "deterministic",
                                               "cost_profile": str(profile)}})


def _draft_model(model, tmp_path):
    path = tmp_path / "draft"
    if not (path / "config.json").exists():
        save_model(model, path)
    return model, SpecConfig(method="draft_model", num_speculative_tokens=3, draft_model=str(path))


def _eagle3(model, tmp_path):
    from specrl.drafters.eagle3.head import Eagle3Config, init_head, save_head
    path = tmp_path / "eagle3"
    if not (path / "config.json").exists():
        save_head(init_head(Eagle3Config.for_target(model.config), seed=0, std=0.3), path)
    return model, SpecConfig(method="eagle3", num_speculative_tokens=4, draft_model=str(path))


def _mtp(model, tmp_path):
    torch.manual_seed(0)
    with_mtp = CausalLM(replace(model.config, num_mtp_modules=2))
    missing, _ = with_mtp.load_state_dict(model.state_dict(), strict=False)
    assert all(m.startswith("mtp.") for m in missing)
    return with_mtp.to(next(model.parameters()).device).eval(), SpecConfig(method="mtp", num_speculative_tokens=4)


FACTORIES = {"ngram": _ngram, "suffix": _suffix, "auto": _auto, "draft_model": _draft_model, "eagle3": _eagle3,
             "mtp": _mtp}
def available(methods):
    return [m for m in methods if m in FACTORIES]


def make(method, model, tmp_path):
    return FACTORIES[method](model, tmp_path)


def propose_after_steps(llm, prompts: list, seed: int, steps: int = 4, k: int = 3):
    """Run `steps` engine steps over `prompts` (sampled at temperature 1), then ask the drafter for `k`
    tokens per running sequence: a drafter whose cache has seen accepted and rejected drafts."""
    from specrl import SamplingParams
    from specrl.engine.sequence import Scheduler
    seqs = llm._make_sequences(prompts, [SamplingParams(temperature=1.0, max_tokens=30, seed=seed)] * len(prompts))
    sched = Scheduler(len(prompts))
    sched.add(seqs)
    for _ in range(steps):
        llm.engine.step(sched)
    return sched.running, llm.drafter.propose(sched.running, [k] * len(sched.running))


def assert_drafts_when_served(policy: CausalLM, method: str, drafter_dir, k: int) -> None:
    """A trained drafter directory loads as `method` beside `policy` and proposes tokens in a generate."""
    from specrl import LLM, SamplingParams
    llm = LLM(policy, spec=SpecConfig(method=method, draft_model=str(drafter_dir), num_speculative_tokens=k))
    llm.generate([[0, 4, 5]], SamplingParams(temperature=0.0, max_tokens=8))
    assert llm.stats["draft_tokens"] > 0
