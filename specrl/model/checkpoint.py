"""Hugging Face checkpoint directories: config.json, (sharded) safetensors, tokenizer files.

Only safetensors are read: a pickled checkpoint (pytorch_model.bin) is refused, never unpickled.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..errors import MissingFileError, UserError
from ..io import atomic_dir
from .causal_lm import CausalLM
from .config import ModelConfig

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                   "chat_template.jinja")
DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


class ModelFileError(UserError, ValueError):
    """A checkpoint directory exists but its files are unreadable (truncated, corrupt) or do not fit together.
    `problem` is the message without its fix, for callers that know a better fix (a training checkpoint)."""

    def __init__(self, problem: str, fix: str = "save or copy the checkpoint again"):
        super().__init__(f"{problem}: {fix}")
        self.problem = problem


def resolve_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def check_device(device: str | torch.device) -> torch.device:
    """`device` as a torch.device, or a UserError saying why it cannot be used here and what to pass."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise UserError(f"device={str(device)!r} is not a torch device: expected 'cpu' or 'cuda[:N]'") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
            raise UserError(f"device={str(device)!r} but CUDA is not available ({why}; torch {torch.__version__}): "
                            "use device=cpu (`--device cpu` for generate and bench), or install a CUDA build of torch")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UserError(f"device={str(device)!r} but only {torch.cuda.device_count()} CUDA device(s) are "
                            "visible: pick an index below that, or check CUDA_VISIBLE_DEVICES")
    return dev


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        pickled = [p.name for p in path.glob("*.bin")] + [p.name for p in path.glob("*.pt")]
        extra = f" Found {pickled}: specrl never unpickles weights; convert them to safetensors." if pickled else ""
        raise MissingFileError(f"no *.safetensors weights in {str(path)!r}.{extra}")
    return {key: tensor for name in files for key, tensor in load_safetensors(path / name).items()}


def load_safetensors(file: Path) -> dict[str, torch.Tensor]:
    """One safetensors file; a truncated or corrupt one is a ModelFileError naming it."""
    try:
        return load_file(str(file))
    except (SafetensorError, OSError) as e:
        raise ModelFileError(f"weights file {str(file)!r} is truncated or corrupt ({e})") from e


def read_config(path: Path) -> ModelConfig:
    file = path / "config.json"
    try:
        return ModelConfig.from_hf(json.loads(file.read_text()))
    except json.JSONDecodeError as e:
        raise ModelFileError(f"{str(file)!r} is not valid JSON ({e})") from e
    except KeyError as e:  # a required hyper-parameter (ModelConfig.from_hf reads the rest with defaults)
        raise ModelFileError(f"{str(file)!r} lacks the key {e.args[0]!r}",
                             "add it (the Hugging Face config.json of this architecture has it) or export the "
                             "checkpoint again") from e


def load_model(path: str | Path, device: str | torch.device = "cpu", dtype="float32") -> CausalLM:
    check_device(device)
    path = Path(path)
    if not (path / "config.json").is_file():
        hint = "" if path.exists() else " (the directory does not exist)"
        raise MissingFileError(f"no Hugging Face checkpoint at {str(path)!r}{hint}: expected config.json and "
                               "*.safetensors. Pass a checkpoint directory, or run `specrl pretrain` for the "
                               "embedded policy.")
    cfg = read_config(path)
    state = read_state_dict(path)
    if cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    with torch.device("meta"):
        model = CausalLM(cfg)
    # assign: the meta parameters are replaced by the loaded tensors (no copy when device and dtype already
    # match), so loading peaks at one copy of the weights
    dtype = resolve_dtype(dtype)
    missing, unexpected = model.load_state_dict({k: v.to(device, dtype) for k, v in state.items()}, strict=False,
                                                assign=True)
    missing = [m for m in missing if not (cfg.tie_word_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        raise ModelFileError(f"checkpoint {str(path)!r} does not match its config: missing {missing[:5]}, "
                             f"unexpected {unexpected[:5]}", "fix config.json or save the checkpoint again")
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.source_path = str(path)
    return model.eval()


def save_model(model: CausalLM, path: str | Path, tokenizer_dir: str | Path | None = None,
               dtype=None, max_shard_bytes: int = 2 << 30, extra_files: dict[str, str] | None = None) -> Path:
    """Writes an HF directory atomically. `dtype` casts the stored weights (e.g. bf16 to ship small)."""
    state = {k: v.detach().to("cpu", resolve_dtype(dtype) if dtype else v.dtype).contiguous()
             for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    hf = model.config.to_hf()
    hf["torch_dtype"] = str(next(iter(state.values())).dtype).removeprefix("torch.")
    src = Path(tokenizer_dir) if tokenizer_dir else Path(model.source_path or "/nonexistent")
    with atomic_dir(path) as tmp:
        (tmp / "config.json").write_text(json.dumps(hf, indent=2))
        shards = shard_state(state, max_shard_bytes)
        n = len(shards)
        names = [f"model-{i + 1:05d}-of-{n:05d}.safetensors" if n > 1 else "model.safetensors" for i in range(n)]
        for name, shard in zip(names, shards):
            save_file(shard, str(tmp / name), metadata={"format": "pt"})
        if n > 1:
            weight_map = {k: name for name, shard in zip(names, shards) for k in shard}
            (tmp / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
        for name in TOKENIZER_FILES:
            if (src / name).is_file():
                shutil.copy(src / name, tmp / name)
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text)
    return Path(path)


def shard_state(state: dict[str, torch.Tensor], max_bytes: int) -> list[dict[str, torch.Tensor]]:
    shards, size = [{}], 0
    for k, v in state.items():
        nbytes = v.numel() * v.element_size()
        if shards[-1] and size + nbytes > max_bytes:
            shards.append({})
            size = 0
        shards[-1][k] = v
        size += nbytes
    return shards
