"""Weights into a running vLLM engine: named tensors are written as a safetensors directory (in memory,
/dev/shm by default) that the engine reloads in place (`reload_weights`). vLLM's CPU linears are repacked
after loading, so tensors cannot be copied into its parameters from outside, and a tensor does not pickle
across its RPC: a file is the transfer. The names and shapes are checked against the checkpoint the engine
was built from before anything is written, so a misfit leaves the engine's weights as they were.

An online drafter's weights arrive in specrl's names: an EAGLE-3 head's own state (fc.*, midlayer.*, norm.*,
and lm_head.weight + d2t with a draft vocabulary) is checked against the head the engine was built with and
written as `specrl export-drafter` writes it, without the lm_head of a full-vocabulary head, which vLLM shares
with the target (it is refitted with the policy). A draft model's HF names are checked against its checkpoint.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ...drafters.weights import check_fits
from ..seam import NamedTensors


class RefitError(ValueError):
    """A refit whose tensors do not fit the engine's model; the engine keeps its weights."""


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


def fitted(weights: NamedTensors, layout: dict[str, tuple[int, ...]], what: str) -> dict[str, torch.Tensor]:
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


class RefitDir:
    """The directory of the newest refit: vLLM reads its path again later (its model_config now names it),
    so it lives until the next refit replaces it, and goes on close()."""

    def __init__(self, root: str | Path, config_dir: str | Path):
        self.root = Path(root)
        self.config = Path(config_dir) / "config.json"
        self.current: Path | None = None

    def write(self, tensors: dict[str, torch.Tensor], config: dict | None = None) -> Path:
        path = Path(tempfile.mkdtemp(prefix="specrl-vllm-refit-", dir=self.root))
        save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
        if config is not None:
            (path / "config.json").write_text(json.dumps(config))
        elif self.config.is_file():
            shutil.copy(self.config, path / "config.json")
        return path

    def commit(self, path: Path) -> None:
        """`path` is what the engine holds now: the one before it can go."""
        old, self.current = self.current, path
        self.discard(old)

    @staticmethod
    def discard(path: Path | None) -> None:
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        self.discard(self.current)
        self.current = None


def eagle3_tensors(export_dir: Path):
    """A function from the learner's head weights to the tensors vLLM's Eagle3 model loads."""
    from ...drafters.eagle3.export import public_tensors
    from ...drafters.eagle3.head import load_head
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


def model_tensors(model_dir: Path):
    """A function from a draft model's HF-named weights to the tensors to load (checked against its files)."""
    layout = checkpoint_layout(model_dir)
    return lambda weights: fitted(weights, layout, "draft model")
