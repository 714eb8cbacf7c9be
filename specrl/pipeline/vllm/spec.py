"""rollout.spec onto vLLM's `speculative_config`: one row per specrl method (engine/methods.py's TABLE).

A row's `build` returns the config dict for vLLM, or raises `UnsupportedMethod` naming what is missing.
EAGLE-3 heads are exported on the fly as `specrl export-drafter` would, so vLLM serves exactly what a user
would export. `auto` has no counterpart: vLLM runs one drafter for every sequence with a draft length fixed
per batch size, so it becomes the first of `spec.drafters` this vLLM runs, with a batch-size -> k schedule
fitted by specrl's cost model (`batch_schedule`); no per-sequence drafter or draft length, no refitting.
"""
from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from ...engine.methods import SpecConfig, get_method
from .refit import checkpoint_layout, eagle3_tensors, model_tensors

# per-position acceptance assumed by `auto`'s schedule: vLLM's schedule is fixed at start-up, so it cannot
# learn the run's own acceptance as specrl's adaptive engine does
AUTO_ACCEPTANCE_PRIOR = 0.7


class UnsupportedMethod(ValueError):
    """rollout.spec asks for something this vLLM cannot run."""


@dataclass(frozen=True)
class Context:
    policy_dir: Path  # the checkpoint the engine is built from
    work_dir: Path  # where on-the-fly exports go (lives as long as the engine)
    max_num_seqs: int


def _k(spec: SpecConfig) -> dict:
    return {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens}


def _drafter_dir(spec: SpecConfig) -> Path:
    if spec.draft_model == "scratch":
        raise UnsupportedMethod("draft_model='scratch' starts a drafter from the policy inside specrl's engine; "
                                "with pipeline.backend=vllm give a trained drafter directory (or none: the "
                                "shipped one)")
    return Path(spec.draft_model) if spec.draft_model else get_method(spec.method).shipped_dir


def ngram(spec: SpecConfig, ctx: Context) -> dict:
    return {**_k(spec), "prompt_lookup_min": spec.ngram_min, "prompt_lookup_max": spec.ngram_max}


def draft_model(spec: SpecConfig, ctx: Context) -> dict:
    return {**_k(spec), "model": str(_drafter_dir(spec))}


def eagle3(spec: SpecConfig, ctx: Context) -> dict:
    """A public export (`specrl export-drafter`'s output) is served as written; a head in specrl's own layout
    is exported first, as `specrl export-drafter` would (checked against the policy)."""
    import json

    import torch
    from safetensors import safe_open

    from ...drafters.eagle3.export import export_eagle3
    from ...drafters.eagle3.head import PUBLIC_ARCHS, load_head
    from ...model.checkpoint import read_config
    src = _drafter_dir(spec)
    config = src / "config.json"
    if config.is_file() and set(json.loads(config.read_text()).get("architectures", [])) & PUBLIC_ARCHS:
        return {**_k(spec), "model": str(src)}
    head = load_head(src, dtype=None)
    layout = checkpoint_layout(ctx.policy_dir)
    name = "lm_head.weight" if "lm_head.weight" in layout else "model.embed_tokens.weight"  # tied embeddings
    lm_head = None
    for f in sorted(ctx.policy_dir.glob("*.safetensors")):
        with safe_open(str(f), "pt") as handle:
            if name in handle.keys():
                lm_head = handle.get_tensor(name).to(torch.float32)  # [V, D]
    out = export_eagle3(head, ctx.work_dir / "eagle3", read_config(ctx.policy_dir), lm_head, source=str(src))
    return {**_k(spec), "model": str(out)}


def suffix(spec: SpecConfig, ctx: Context) -> dict:
    if not _has_arctic():
        raise UnsupportedMethod("vLLM's suffix decoding needs arctic-inference, which is not installed here "
                                "(pip install arctic-inference; it ships no build for every platform)")
    return {**_k(spec), "suffix_decoding_max_spec_factor": spec.suffix_scale}


def mtp(spec: SpecConfig, ctx: Context) -> dict:
    raise UnsupportedMethod("vLLM runs MTP only for architectures whose checkpoints carry their own MTP layers "
                            "(DeepSeek-V3, Qwen3-Next/3.5, MiMo, GLM-4.5 ...); specrl's MTP modules for a "
                            "dense Qwen3/Llama policy have no vLLM model class")


def auto(spec: SpecConfig, ctx: Context) -> dict:
    skipped = []
    for name in spec.drafters:
        try:
            config = VLLM_METHODS[name].build(replace(spec, method=name), ctx)
        except UnsupportedMethod as e:
            skipped.append(f"{name}: {e}")
            continue
        drafter_params = _params(Path(config["model"])) if get_method(name).model_based else 0
        schedule = batch_schedule(_params(ctx.policy_dir), drafter_params, spec.num_speculative_tokens,
                                  ctx.max_num_seqs, spec.cost_profile)
        return {**config, "num_speculative_tokens_per_batch_size": schedule}
    raise UnsupportedMethod(f"'auto' found no drafter among {list(spec.drafters)} that this vLLM runs "
                            f"({'; '.join(skipped)})")


def _params(model_dir: Path) -> int:
    return sum(math.prod(shape) for shape in checkpoint_layout(model_dir).values())


def batch_schedule(target_params: int, drafter_params: int, k_max: int, max_batch: int,
                   profile: str | None = None, acceptance: float = AUTO_ACCEPTANCE_PRIOR) -> list[list[int]]:
    """vLLM's [[first batch, last batch, k], ...]: per batch size b the k in 0..k_max with the most expected
    tokens per second, b * (1 + a + ... + a^k) / (target(b (k + 1) tokens) + drafter(b k tokens, k steps)),
    under specrl's cost model (a saved profile, else counted work)."""
    from ...engine.cost_model import CostModel
    cost = CostModel(target_params, {"d": drafter_params}, deterministic=True)
    if profile is not None:
        cost.load_profile(profile)

    def rate(b: int, k: int) -> float:
        tokens = sum(acceptance ** i for i in range(k + 1))
        return b * tokens / (cost.target_s(b * (k + 1), b) + cost.draft_s("d", b * k, k))

    best = [max(range(k_max + 1), key=lambda k: rate(b, k)) for b in range(1, max_batch + 1)]
    ranges: list[list[int]] = []
    for b, k in enumerate(best, start=1):
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = b
        else:
            ranges.append([b, b, k])
    return ranges


def _has_arctic() -> bool:
    return importlib.util.find_spec("arctic_inference") is not None


@dataclass(frozen=True)
class VllmMethod:
    build: Callable[[SpecConfig, Context], dict]
    # (its checkpoint dir) -> a function from the learner's drafter weights to what vLLM's drafter loads;
    # None: no weights to refit
    refit: Callable[[Path], Callable] | None = None
    available: Callable[[], bool] = lambda: True  # runs with what is installed here


VLLM_METHODS: dict[str, VllmMethod] = {
    "ngram": VllmMethod(ngram), "draft_model": VllmMethod(draft_model, refit=model_tensors),
    "eagle3": VllmMethod(eagle3, refit=eagle3_tensors),
    "suffix": VllmMethod(suffix, available=_has_arctic),
    "mtp": VllmMethod(mtp, available=lambda: False), "auto": VllmMethod(auto),
}


def speculative_config(spec: SpecConfig, ctx: Context) -> dict | None:
    """vLLM's speculative_config for `spec` (None: SD off); an UnsupportedMethod lists what runs here."""
    if not spec.enabled:
        return None
    try:
        return VLLM_METHODS[spec.method].build(spec, ctx)
    except UnsupportedMethod as e:
        runs = [name for name, row in VLLM_METHODS.items() if row.available()]
        raise UnsupportedMethod(f"rollout.spec.method={spec.method!r} cannot run on pipeline.backend=vllm: {e}. "
                                f"Runs here: {runs} (or null: SD off)") from None
