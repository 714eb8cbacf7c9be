"""What the methods' vLLM members share: the refusal, the engine's context, and reading and checking a
checkpoint's tensors (pipeline/vllm/ builds the engine from a method's `vllm_config` and refits it through its
`vllm_refit`). No import of vLLM here: these read specrl's and HF's files only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import torch
from safetensors import safe_open

from ..engine.methods import SCRATCH, SHIPPED_DRAFTERS_DIR, SpecConfig


class UnsupportedMethod(ValueError):
    """rollout.spec asks for something this vLLM cannot run."""


class RefitError(ValueError):
    """A refit whose tensors do not fit the engine's model; the engine keeps its weights."""


@dataclass(frozen=True)
class Context:
    policy_dir: Path  # the checkpoint the engine is built from
    work_dir: Path  # where on-the-fly exports go (lives as long as the engine)
    max_num_seqs: int


def k_config(spec: SpecConfig) -> dict:
    return {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens}


def drafter_dir(spec: SpecConfig) -> Path:
    """The trained drafter vLLM loads: spec.draft_model, else the shipped one; refuses a cold start."""
    if spec.draft_model == SCRATCH:
        raise UnsupportedMethod("draft_model='scratch' starts a drafter from the policy inside specrl's engine; "
                                "with pipeline.backend=vllm give a trained drafter directory (or none: the "
                                "shipped one)")
    return Path(spec.draft_model) if spec.draft_model else SHIPPED_DRAFTERS_DIR / spec.method


def checkpoint_layout(model_dir: str | Path) -> dict[str, tuple[int, ...]]:
    """Each tensor name of an HF checkpoint directory -> its shape, read from the safetensors headers."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {str(model_dir)!r}: vLLM loads the policy from "
                                "safetensors; save it with specrl (save_model) or convert it")
    layout = {}
    for f in files:
        with safe_open(str(f), "pt") as handle:
            for name in handle.keys():
                layout[name] = tuple(handle.get_slice(name).get_shape())
    return layout


def checkpoint_params(model_dir: Path) -> int:
    return sum(math.prod(shape) for shape in checkpoint_layout(model_dir).values())


def fitted(weights: Iterable[tuple[str, torch.Tensor]], layout: dict[str, tuple[int, ...]],
           what: str) -> dict[str, torch.Tensor]:
    """The tensors of `weights` the checkpoint has, detached on the CPU; a RefitError names the first misfits.
    Names the checkpoint leaves out because they are tied (lm_head.weight with tied embeddings) are dropped."""
    named = dict(weights)
    extra = sorted(set(named) - set(layout) - {"lm_head.weight"})
    missing = sorted(set(layout) - set(named))
    shapes = sorted(f"{k} {tuple(named[k].shape)} (engine {layout[k]})" for k in set(named) & set(layout)
                    if tuple(named[k].shape) != layout[k])
    if extra or missing or shapes:
        raise RefitError(f"the {what} refit does not fit the engine's model: unknown {extra[:3]}, missing "
                         f"{missing[:3]}, shapes {shapes[:3]}; the engine keeps its current weights. Send the "
                         "weights of the model the engine was built from (same architecture and sizes)")
    return {k: named[k].detach().to("cpu").contiguous() for k in layout}
