"""Speculative-decoding settings (`SpecConfig`, the `spec=` argument of `LLM`) and the one table of drafters.

Every list of method names in specrl (config validation, `specrl bench spec`, `specrl train-drafter`, the
simulator's `--sd-method`, "auto"'s inner drafter) is derived from `TABLE`. The engine builds a drafter
through its row's module path (a plugin lookup with importlib), so the engine core has no static import of
`specrl.drafters`: drafters import the core, never the other way round. Torch-free, so light commands (e.g.
`specrl simulate`) can read the table without importing torch.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

# The longest draft a step may verify. Engine and drafter KV caches keep this many spare positions past a
# sequence's budget, and the per-position acceptance counters have this many slots: one limit for all.
MAX_SPEC_TOKENS = 16

# Where the shipped drafters live, one subdirectory per model-based method (`specrl train-drafter` default).
SHIPPED_DRAFTERS_DIR = Path(__file__).resolve().parents[1] / "tasks" / "assets" / "drafters"


@dataclass(frozen=True)
class DrafterMethod:
    name: str
    module: str  # has `build(spec, target, num_slots, max_len) -> Drafter`
    model_based: bool  # has trainable weights (a checkpoint dir; the shipped one is `shipped_dir`)
    trainer: str | None = None  # module with `train(policy, out, data, args)` for `specrl train-drafter`
    adaptive: bool = False  # picks another method's drafts per step instead of drafting itself

    @property
    def shipped_dir(self) -> Path:
        """The embedded default checkpoint of a model-based drafter."""
        return SHIPPED_DRAFTERS_DIR / self.name


TABLE: tuple[DrafterMethod, ...] = (
    DrafterMethod("draft_model", "specrl.drafters.draft_model.drafter", True, "specrl.drafters.draft_model.train"),
    DrafterMethod("eagle3", "specrl.drafters.eagle3.drafter", True, "specrl.drafters.eagle3.train"),
    DrafterMethod("mtp", "specrl.drafters.mtp.drafter", True, "specrl.drafters.mtp.train"),
    DrafterMethod("ngram", "specrl.drafters.ngram.drafter", False),
    DrafterMethod("suffix", "specrl.drafters.suffix.drafter", False),
    DrafterMethod("auto", "specrl.drafters.auto", False, adaptive=True),
)
_BY_NAME = {m.name: m for m in TABLE}
METHODS: tuple[str, ...] = tuple(_BY_NAME)
DRAFTING_METHODS: tuple[str, ...] = tuple(m.name for m in TABLE if not m.adaptive)  # what "auto" can run
TRAINABLE_METHODS: tuple[str, ...] = tuple(m.name for m in TABLE if m.trainer is not None)


def get_method(name: str | None) -> DrafterMethod:
    """The table row of `name`; an unknown name raises a ValueError that lists the valid ones."""
    if name not in _BY_NAME:
        raise ValueError(f"unknown speculative method {name!r}; valid: {list(METHODS)} (or method=None to "
                         "turn SD off)")
    return _BY_NAME[name]


@dataclass
class SpecConfig:
    method: str | None = None  # None turns SD off
    num_speculative_tokens: int = 4  # k
    draft_model: str | None = None  # checkpoint dir for draft_model / eagle3 (None: the embedded default)
    ngram_min: int = 2  # shortest suffix an n-gram/suffix match must have
    ngram_max: int = 8  # longest suffix the n-gram drafter tries
    suffix_scale: float = 1.0  # suffix drafter: draft up to scale * match_length tokens (capped at k)
    auto_max_batch: int = 32  # "auto": SD off above this many running sequences (TLT)
    auto_methods: tuple[str, ...] = ("suffix",)  # "auto": the drafter it runs when SD is on

    def __post_init__(self):
        if self.method is not None:
            get_method(self.method)
        if not 1 <= self.num_speculative_tokens <= MAX_SPEC_TOKENS:
            raise ValueError(f"num_speculative_tokens={self.num_speculative_tokens} must be in "
                             f"[1, {MAX_SPEC_TOKENS}]")
        if self.ngram_min < 1 or self.ngram_max < self.ngram_min:
            raise ValueError(f"need 1 <= ngram_min ({self.ngram_min}) <= ngram_max ({self.ngram_max})")

    @property
    def enabled(self) -> bool:
        return self.method is not None


SCRATCH, SCRATCH_MODULE = "scratch", "specrl.drafters.scratch"  # cold start: spec.draft_model="scratch"


def model_method(spec: SpecConfig, what: str = "draft_model='scratch'") -> str:
    """The model drafter `spec` runs ("auto" resolves to the drafter it wraps); an error for model-free ones.
    Here, torch-free, so that config validation (rollout.drafter.online) reads it without the drafters."""
    method = spec.method
    if method == "auto":
        method = spec.auto_methods[0] if spec.auto_methods else None
    if method not in TRAINABLE_METHODS:
        raise ValueError(f"{what} needs a model drafter, but method={spec.method!r}"
                         f"{f' (auto over {method!r})' if spec.method == 'auto' else ''} has no weights: use "
                         f"method in {list(TRAINABLE_METHODS)} (or auto_methods=('eagle3',)), or drop {what}")
    return method


def build_drafter(spec: SpecConfig, target, num_slots: int, max_len: int):
    """The Drafter (see specrl.engine.drafting) of `spec.method`; its module is imported only now.
    draft_model="scratch" starts a model drafter from the policy itself (specrl.drafters.scratch)."""
    row = get_method(spec.method)
    if spec.draft_model == SCRATCH and not row.adaptive:  # auto builds its inner drafter through here
        return importlib.import_module(SCRATCH_MODULE).build(spec, target, num_slots, max_len)
    if spec.draft_model == SCRATCH:
        model_method(spec)  # auto over a model-free one: a clear error
    return importlib.import_module(row.module).build(spec, target, num_slots, max_len)
