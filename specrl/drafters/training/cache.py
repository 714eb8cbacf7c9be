"""The teacher-data cache of `specrl train-drafter --cache DIR`: sampled responses (and eagle3's teacher
outputs) written once and read back by later runs, plus the fit's state for `--resume`.

    DIR/meta.json        fingerprints of the policy's weights and tokenizer, and the sampling settings
    DIR/sequences.pt     [(prompt_ids, response_ids), ...]
    DIR/teacher-*.pt     eagle3 teacher outputs, one file per (layers, top k, autocast)
    DIR/train_state.pt   the fit's module, optimizer, step and clock (data.fit), with its method and vocabulary

Data from another model or tokenizer is refused (ids and targets would not match), and so is data sampled
with other settings, which a reader would otherwise take for what it asked for.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

from ...io import atomic_write_json

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                   "tokenizer.model")


def digest_files(paths: list[Path]) -> str | None:
    if not paths:
        return None
    h = hashlib.blake2b(digest_size=16)
    for p in paths:
        h.update(p.name.encode())
        with open(p, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
    return h.hexdigest()


def fingerprint(policy_dir: str | Path) -> dict:
    """Hashes of the policy's config and weights ("model") and of its tokenizer files ("tokenizer": None if none)."""
    d = Path(policy_dir)
    model = digest_files([d / "config.json", *sorted(d.glob("*.safetensors"))])
    return {"model": model, "tokenizer": digest_files([d / n for n in TOKENIZER_FILES if (d / n).is_file()])}


def check_meta(cache: Path, want: dict) -> None:
    """Raises if the cache at `cache` was collected from another model, tokenizer or settings than `want`."""
    have = json.loads((cache / "meta.json").read_text())
    for key, what in (("model", "another model (its config or weights differ)"),
                      ("tokenizer", "another tokenizer")):
        if have["fingerprint"].get(key) != want["fingerprint"].get(key):
            raise ValueError(f"the teacher-data cache {str(cache)!r} was collected from {what} than the policy "
                            f"{want['policy']!r} (collected from {have['policy']!r}): its token ids and targets "
                            "would not match; pass another --cache DIR or delete this one")
    diff = {k: (have["settings"].get(k), v) for k, v in want["settings"].items() if have["settings"].get(k) != v}
    if diff:
        shown = ", ".join(f"{k}: cached {a!r}, asked {b!r}" for k, (a, b) in sorted(diff.items()))
        raise ValueError(f"the teacher-data cache {str(cache)!r} was sampled with other settings ({shown}): rerun "
                        "with the cached settings, or pass another --cache DIR")


def load_or_collect(cache: str | Path | None, policy: str, settings: dict, collect) -> tuple[list, bool]:
    """The cached sequences if `cache` holds them for this policy and settings, else `collect()`'s, written
    there. -> (sequences, whether they came from the cache)."""
    if cache is None:
        return collect(), False
    cache = Path(cache)
    want = {"policy": str(policy), "fingerprint": fingerprint(policy), "settings": settings}
    if (cache / "meta.json").is_file():
        check_meta(cache, want)
        return torch.load(cache / "sequences.pt"), True
    data = collect()
    cache.mkdir(parents=True, exist_ok=True)
    save(cache / "sequences.pt", data)
    atomic_write_json(cache / "meta.json", want)  # last: it marks the cache complete
    return data, False


def save(path: Path, obj) -> None:
    """torch.save through a temporary file, so an interrupted run leaves the old file or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def data_digest(data: list) -> str:
    """A hash of the (prompt_ids, response_ids) pairs, which names the sequences a teacher file was made over."""
    return hashlib.blake2b(json.dumps(data).encode(), digest_size=16).hexdigest()


def teacher_path(cache: str | Path, layers, topk: int, autocast: bool) -> Path:
    return Path(cache) / f"teacher-L{'-'.join(str(i) for i in layers)}-k{topk}-{'bf16' if autocast else 'fp32'}.pt"
