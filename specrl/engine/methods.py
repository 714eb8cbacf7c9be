"""Speculative-decoding settings (`SpecConfig`, the `spec=` argument of `LLM`) and the one table of drafters,
from which every list of method names in specrl is derived. The engine builds a drafter through its row's
module path (importlib), so the engine core never imports `specrl.drafters`. Torch-free, so light commands
(e.g. `specrl simulate`) can read the table without importing torch.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import require

# The longest draft a step may verify: the spare positions of every KV cache and the slots of the per-position
# acceptance counters, one limit for all.
MAX_SPEC_TOKENS = 16

# one subdirectory per model-based method (`specrl train-drafter` default)
SHIPPED_DRAFTERS_DIR = Path(__file__).resolve().parents[1] / "tasks" / "assets" / "drafters"


@dataclass(frozen=True)
class DrafterMethod:
    name: str
    module: str  # has `build(spec, target, num_slots, max_len) -> Drafter` (adaptive: -> (DrafterPool, Strategy))
    model_based: bool  # has trainable weights (a checkpoint dir; the shipped one is `shipped_dir`)
    trainer: str | None = None  # module with `train(policy, out, data, args)` for `specrl train-drafter`
    adaptive: bool = False  # picks another method's drafts per step instead of drafting itself
    # "auto" may defer its observations while it is idle (engine/deferred.py): its observe is position-local
    # (cache rows from each input alone); MTP's modules read the next inputs, so it observes every step
    defers: bool = False
    # the simulator's default drafting cost, a share of the target's forward (None: sim/cost.py eagle_draft_frac;
    # 0.0: CPU work that the fitted overheads hold)
    sim_draft_frac: float | None = 0.0

    @property
    def shipped_dir(self) -> Path:
        """The embedded default checkpoint of a model-based drafter."""
        return SHIPPED_DRAFTERS_DIR / self.name


TABLE: tuple[DrafterMethod, ...] = (
    DrafterMethod("draft_model", "specrl.drafters.draft_model.drafter", True, "specrl.drafters.draft_model.train",
                  defers=True, sim_draft_frac=0.1),
    DrafterMethod("eagle3", "specrl.drafters.eagle3.drafter", True, "specrl.drafters.eagle3.train", defers=True,
                  sim_draft_frac=None),
    DrafterMethod("mtp", "specrl.drafters.mtp.drafter", True, "specrl.drafters.mtp.train", sim_draft_frac=None),
    DrafterMethod("ngram", "specrl.drafters.ngram.drafter", False),
    DrafterMethod("suffix", "specrl.drafters.suffix.drafter", False),
    DrafterMethod("auto", "specrl.engine.adaptive.factory", False, adaptive=True),
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


def is_adaptive(name: str | None) -> bool:
    """Whether method `name` chooses among other drafters per step ("auto"); False for None (SD off)."""
    return name is not None and get_method(name).adaptive


@dataclass
class SpecConfig:
    method: str | None = None  # None turns SD off
    num_speculative_tokens: int = 4  # k
    draft_model: str | None = None  # checkpoint dir for draft_model / eagle3 (None: the embedded default)
    ngram_min: int = 2  # shortest suffix an n-gram/suffix match must have
    ngram_max: int = 8  # longest suffix the n-gram drafter tries
    suffix_scale: float = 1.0  # suffix drafter: draft up to scale * match_length tokens (capped at k)
    # "auto" (the adaptive engine, engine/adaptive/): the drafters it chooses among per sequence and step;
    # one that cannot be built here (no checkpoint) is left out with a warning, none at all is an error
    drafters: tuple[str, ...] = ("suffix", "ngram", "eagle3")
    # "auto": "measured" fits its cost model to this engine's step timings; "deterministic" freezes it (from
    # `cost_profile`, else counted work), so a seeded run repeats token for token (README, the two modes)
    adaptive_mode: str = "measured"
    cost_profile: str | None = None  # a cost model saved as JSON (`specrl bench adaptive --save-profile`)

    # keys that no longer exist and what replaced them, for a clear error on an old config
    REMOVED = {
        "auto_max_batch": "'auto' no longer turns SD off above a fixed batch size: its cost model, measured on "
                          "this machine during the run, decides per step whether drafting pays (see rollout.spec."
                          "adaptive_mode); delete the key",
        "auto_methods": "'auto' now chooses per sequence among `drafters` (default suffix, ngram, eagle3): rename "
                        "auto_methods to drafters",
    }

    def __post_init__(self):
        self.validate()  # also when built in Python, LLM(spec=SpecConfig(...))

    def validate(self) -> None:
        require(self.method is None or self.method in METHODS, "method", self.method,
                f"one of {list(METHODS)}", "or method=None to turn SD off")
        require(self.adaptive_mode in ADAPTIVE_MODES, "adaptive_mode", self.adaptive_mode,
                f"one of {list(ADAPTIVE_MODES)}")
        require(bool(self.drafters) and all(d in DRAFTING_METHODS for d in self.drafters), "drafters",
                list(self.drafters), f"at least one of {list(DRAFTING_METHODS)} (the drafters 'auto' can choose "
                "among), each")
        require(1 <= self.num_speculative_tokens <= MAX_SPEC_TOKENS, "num_speculative_tokens",
                self.num_speculative_tokens, f"in [1, {MAX_SPEC_TOKENS}]")
        require(1 <= self.ngram_min <= self.ngram_max, "ngram_min", self.ngram_min,
                f"in [1, ngram_max={self.ngram_max}]")

    @property
    def enabled(self) -> bool:
        return self.method is not None


ADAPTIVE_MODES = ("measured", "deterministic")

SCRATCH, SCRATCH_MODULE = "scratch", "specrl.drafters.scratch"  # cold start: spec.draft_model="scratch"


def model_method(spec: SpecConfig, what: str = "draft_model='scratch'") -> str:
    """The model drafter `spec` runs ("auto" resolves to the drafter it wraps); an error for model-free ones.
    Here, torch-free, so that config validation (rollout.drafter.online) reads it without the drafters."""
    method, adaptive = spec.method, is_adaptive(spec.method)
    if adaptive:
        method = next((d for d in spec.drafters if d in TRAINABLE_METHODS), None)
    if method not in TRAINABLE_METHODS:
        over = f" ({spec.method} over {list(spec.drafters)})" if adaptive else ""
        raise ValueError(f"{what} needs a model drafter, but method={spec.method!r}{over} has no weights: use "
                         f"method in {list(TRAINABLE_METHODS)} (or add one to drafters, e.g. drafters=('suffix', "
                         f"'eagle3')), or drop {what}")
    return method


def build_drafter(spec: SpecConfig, target, num_slots: int, max_len: int):
    """The Drafter of `spec.method`, its module imported only now (draft_model="scratch": from the policy)."""
    row = get_method(spec.method)
    if row.adaptive:
        raise ValueError("'auto' is not one drafter: the engine builds its drafters and strategy through "
                         "build_engine_drafting")
    if spec.draft_model == SCRATCH:
        model_method(spec)  # a model-free method: a clear error
        return importlib.import_module(SCRATCH_MODULE).build(spec, target, num_slots, max_len)
    return importlib.import_module(row.module).build(spec, target, num_slots, max_len)


def build_engine_drafting(spec: SpecConfig, drafter, target, num_slots: int, max_len: int):
    """The engine's (DrafterPool, Strategy) for `spec`, or for a plugged-in `drafter` (it drafts
    spec.num_speculative_tokens tokens every step; a DrafterPool is used as it is); (None, None) with SD off."""
    from .pool import DrafterPool
    from .strategy import StaticStrategy
    if isinstance(drafter, DrafterPool):
        return drafter, StaticStrategy(next(iter(drafter.drafters)), spec.num_speculative_tokens)
    if drafter is not None:
        return DrafterPool({"custom": drafter}), StaticStrategy("custom", spec.num_speculative_tokens)
    if not spec.enabled:
        return None, None
    row = get_method(spec.method)
    if row.adaptive:
        return importlib.import_module(row.module).build(spec, target, num_slots, max_len)
    pool = DrafterPool({row.name: build_drafter(spec, target, num_slots, max_len)},
                       (row.name,) if row.model_based else ())
    return pool, StaticStrategy(row.name, spec.num_speculative_tokens)
