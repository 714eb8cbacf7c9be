"""`build`: the DrafterPool of the method's `drafters` option (those that can be built here) and the AdaptiveStrategy over it
(what method "auto" builds, drafters/auto/method.py)."""
from __future__ import annotations

import dataclasses
import logging

import torch

from ..methods import SCRATCH, SpecConfig, build_drafter, get_method, model_method
from ..pool import Deferred, DrafterPool
from . import profile
from .cost_model import CostModel, pair_work
from .strategy import AdaptiveStrategy

log = logging.getLogger(__name__)


def own_params(drafter, target) -> int:
    """Parameters of a drafter's own modules (not the target's it may hold a reference to)."""
    shared = {id(p) for p in target.parameters()}
    own = {id(p): p for m in vars(drafter).values() if isinstance(m, torch.nn.Module) for p in m.parameters()}
    return sum(p.numel() for i, p in own.items() if i not in shared)


def build(spec: SpecConfig, target, num_slots: int, max_len: int) -> tuple[DrafterPool, AdaptiveStrategy]:
    if spec.draft_model == SCRATCH:
        model_method(spec)  # scratch needs a model drafter among `drafters`: a clear error otherwise
    opts = spec.options[spec.method]  # drafters/auto/method.py AutoOptions: drafters, mode, cost_profile
    drafters, missing = {}, {}
    for name in dict.fromkeys(opts.drafters):
        try:
            own = dataclasses.replace(spec, method=name, draft_model=spec.draft_model if get_method(name).trainable
                                      else None)  # a checkpoint (or "scratch") is the model drafters'
            drafters[name] = build_drafter(own, target, num_slots, max_len)
        except (FileNotFoundError, ValueError) as e:
            missing[name] = str(e)
    if not drafters:
        detail = "; ".join(f"{n}: {msg}" for n, msg in missing.items())
        raise ValueError(f"method={spec.method!r} chooses among drafters={list(opts.drafters)}, but none of them "
                         f"can be built here: {detail}. Build one (e.g. `specrl train-drafter --method eagle3`), "
                         f"or add a model-free one (suffix, ngram) to drafters")
    for name, msg in missing.items():
        log.warning("%s: drafter %r left out (%s)", spec.method, name, msg)
    model_based = tuple(n for n in drafters if get_method(n).trainable)
    deferred = {n: Deferred(drafters[n]) for n in model_based if get_method(n).defers}  # idle, it costs nothing
    pool = DrafterPool({**drafters, **deferred}, model_based)
    cost = CostModel(target.config.num_params, {n: own_params(d, target) for n, d in drafters.items()},
                     deterministic=opts.mode == "deterministic", pair_work=pair_work(target.config))
    point = {n for n in drafters if not get_method(n).trainable}
    strategy = AdaptiveStrategy(list(drafters), point, spec.num_speculative_tokens, cost, set(deferred))
    path = opts.cost_profile if opts.cost_profile is not None else profile.shipped_path(spec, target)
    if path is not None and profile.load(strategy, path, target):
        log.info("%s: starts from the profile %s", spec.method, path)
    return pool, strategy
