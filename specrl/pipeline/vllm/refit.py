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
from safetensors.torch import save_file

from ...drafters.vllm import RefitError, checkpoint_layout, fitted  # noqa: F401 (read here by the backend)


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
