"""State trees on disk as safetensors + JSON, never pickle, so that a checkpoint from elsewhere can be read
without running any code it carries. A state tree is what `state_dict()` returns: nested dicts (any int/str
keys), lists, tuples, scalars, strings, None and tensors. `save_state` writes every tensor to NAME.safetensors,
keyed by its path in the tree, and the rest to NAME.json with references in their place; `load_state` inverts
it exactly, except that tuples come back as lists."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

TENSOR, DICT = "__tensor__", "__dict__"  # markers of a tensor reference and of a dict with non-str keys


class StateFileError(ValueError):
    """A state file pair is missing, truncated or not in this format."""


def _encode(x, path: str, tensors: dict[str, torch.Tensor], seen: dict):
    """`x` with its tensors moved into `tensors`; `seen` keeps one copy of tensors sharing memory (tied weights)."""
    if isinstance(x, torch.Tensor):
        key = (x.device, x.data_ptr(), x.dtype, tuple(x.shape), x.stride()) if x.numel() else None
        if key in seen:
            return {TENSOR: seen[key]}
        if key is not None:
            seen[key] = path
        tensors[path] = x.detach().cpu().contiguous()
        return {TENSOR: path}
    if isinstance(x, dict):
        items = [(k, _encode(v, f"{path}.{k}", tensors, seen)) for k, v in x.items()]
        if all(isinstance(k, str) and k not in (TENSOR, DICT) for k, _ in items):
            return dict(items)
        return {DICT: [[k, v] for k, v in items]}
    if isinstance(x, (list, tuple)):
        return [_encode(v, f"{path}.{i}", tensors, seen) for i, v in enumerate(x)]
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    raise TypeError(f"state entry {path!r} has type {type(x).__name__}: a state tree holds only tensors, "
                    "dicts, lists, numbers, strings and None")


def _decode(x, tensors: dict[str, torch.Tensor]):
    if isinstance(x, dict):
        if TENSOR in x:
            return tensors[x[TENSOR]]
        return {k: _decode(v, tensors) for k, v in (x[DICT] if DICT in x else x.items())}
    if isinstance(x, list):
        return [_decode(v, tensors) for v in x]
    return x


def save_state(directory: str | Path, name: str, tree) -> None:
    """Writes `directory/name.safetensors` and `directory/name.json` (call inside an atomic_dir)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {}
    meta = _encode(tree, "root", tensors, {})
    save_file(tensors, str(directory / f"{name}.safetensors"))
    (directory / f"{name}.json").write_text(json.dumps(meta))


def has_state(directory: str | Path, name: str) -> bool:
    return (Path(directory) / f"{name}.json").is_file()


def load_state(directory: str | Path, name: str, device: str | torch.device = "cpu"):
    directory = Path(directory)
    try:
        meta = json.loads((directory / f"{name}.json").read_text())
        tensors = load_file(str(directory / f"{name}.safetensors"), device=str(device))
        return _decode(meta, tensors)
    except (OSError, ValueError, KeyError, SafetensorError) as e:
        raise StateFileError(f"{str(directory / name)}.{{json,safetensors}} is missing or unreadable: {e}") from e
