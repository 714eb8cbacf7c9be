"""The EAGLE-3 head as vLLM serves it: exported on the fly as `specrl export-drafter` would (so vLLM serves
exactly what a user would export), and refitted from the learner's weights in that layout."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from ...model.checkpoint import read_config
from ..vllm import RefitError, checkpoint_layout
from ..weights import check_fits
from .export import export_eagle3, public_tensors
from .head import PUBLIC_ARCHS, load_head


def vllm_export(src: Path, policy_dir: Path, work_dir: Path) -> Path:
    """`src` itself when it is a public export already, else its export under `work_dir`, checked against the
    policy in `policy_dir` (whose lm_head a full-vocabulary head shares)."""
    config = src / "config.json"
    if config.is_file() and set(json.loads(config.read_text()).get("architectures", [])) & PUBLIC_ARCHS:
        return src
    head = load_head(src, dtype=None)
    layout = checkpoint_layout(policy_dir)
    name = "lm_head.weight" if "lm_head.weight" in layout else "model.embed_tokens.weight"  # tied embeddings
    lm_head = None
    for f in sorted(policy_dir.glob("*.safetensors")):
        with safe_open(str(f), "pt") as handle:
            if name in handle.keys():
                lm_head = handle.get_tensor(name).to(torch.float32)  # [V, D]
    return export_eagle3(head, work_dir / "eagle3", read_config(policy_dir), lm_head, source=str(src))


def refit_tensors(export_dir: Path):
    """A function from the learner's head weights to the tensors vLLM's Eagle3 model loads."""
    head = load_head(export_dir)  # the layout the engine serves: its sizes, draft vocabulary and dtype
    full = head.config.draft_vocab_size == head.config.vocab_size

    def convert(weights) -> dict[str, torch.Tensor]:
        named = {k: v.detach().to("cpu") for k, v in weights}
        if full:  # specrl's full-vocabulary head has no lm_head/d2t; the exported one has identity ones
            named = {**{k: v for k, v in head.state_dict().items() if k in ("lm_head.weight", "d2t")}, **named}
        try:
            check_fits(head.state_dict(), named)
        except ValueError as e:
            raise RefitError(f"the EAGLE-3 drafter refit does not fit the engine's head: {e}") from None
        head.load_state_dict(named)
        tensors = public_tensors(head, None, torch.float32, "eagle3")
        return {k: v for k, v in tensors.items() if not (full and k == "lm_head.weight")}
    return convert
