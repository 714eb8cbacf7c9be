"""The one list of speculative methods: name -> the class that carries everything about it (how it builds in
the engine, cold start, training, export, vLLM mapping, simulator cost). A new method is one folder and one line
here. Each class is imported when first asked for, so the list reads without torch; specrl/__init__.py imports
this module, which hands its lookup to the engine (engine/methods.py `use_registry`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ..engine.methods import DrafterMethod, use_registry
from ..registry import load

REGISTRY: dict[str, str] = {
    "draft_model": "specrl.drafters.draft_model.method:DraftModel",
    "eagle3": "specrl.drafters.eagle3.method:Eagle3",
    "mtp": "specrl.drafters.mtp.method:MTP",
    "ngram": "specrl.drafters.ngram.method:Ngram",
    "suffix": "specrl.drafters.suffix.method:Suffix",
    "auto": "specrl.drafters.auto.method:Auto",
}
_loaded: dict[str, DrafterMethod] = {}


class ModelMethod(DrafterMethod, Protocol):
    """What a method with weights (`trainable`) adds: the members cold start, online training
    (training/online.py), `specrl train-drafter` and the checkpoints call."""
    shipped_dir: Path  # the embedded default checkpoint
    module_class: type  # the nn.Module its drafter drafts with (what OnlineDrafterTrainer trains)
    train_settings: type | None  # its own `specrl train-drafter` settings (a dataclass), or None

    def scratch(self, policy, seed: int = 0): ...  # cold start: its module made from the policy

    def engine_drafter(self, module, target, num_slots: int, max_len: int): ...  # the engine's Drafter over it

    def capture_layers(self, module) -> tuple[int, ...]: ...  # policy layers online training reads (-1: last)

    def draft_ids(self, module): ...  # target ids of its logits' columns (None: the whole vocabulary)

    def online_logits(self, trainer, mb) -> list: ...  # (weight, draft logits, policy logits, mask) per term

    def cli_train(self, ns, on_log=None): ...  # train(policy, out, data, args) with its CLI options bound

    def save(self, module, policy, path, dtype: str | None = None): ...  # its checkpoint layout


def register(name: str, method: str | DrafterMethod) -> None:
    """Adds (or replaces) method `name`: a "module:Class" path or a method object (e.g. a test's toy method)."""
    REGISTRY[name] = method if isinstance(method, str) else f"<object {type(method).__name__}>"
    _loaded.pop(name, None)
    if not isinstance(method, str):
        _loaded[name] = method


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)
    _loaded.pop(name, None)


def get_method(name: str | None) -> DrafterMethod:
    """The method object of `name`; an unknown name raises a ValueError that lists the valid ones."""
    if name not in REGISTRY:
        raise ValueError(f"unknown speculative method {name!r}; valid: {list(REGISTRY)} (or method=None to "
                         "turn SD off)")
    if name not in _loaded:
        _loaded[name] = load(REGISTRY[name])()
    return _loaded[name]


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


use_registry(get_method, names)
