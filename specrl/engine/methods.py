"""Speculative-decoding settings (`SpecConfig`, the `spec=` argument of `LLM`) and what the engine asks of a
drafter method (`DrafterMethod`).

Each method is one class in its own folder, `specrl/drafters/<method>/method.py`, listed once in
`specrl/drafters/registry.py`. The engine sits below the drafters, so it never imports them: the registry hands
its lookup to `use_registry` when `specrl` is imported (specrl/__init__.py), and `get_method` asks it. Torch-free,
so light commands (e.g. `specrl simulate`) read the names without importing torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from ..errors import require

# The longest draft a step may verify: the spare positions of every KV cache and the slots of the per-position
# acceptance counters, one limit for all.
MAX_SPEC_TOKENS = 16

# one subdirectory per model-based method (`specrl train-drafter` default)
SHIPPED_DRAFTERS_DIR = Path(__file__).resolve().parents[1] / "tasks" / "assets" / "drafters"

SCRATCH = "scratch"  # cold start: spec.draft_model="scratch" builds the drafter from the policy
ADAPTIVE_MODES = ("measured", "deterministic")


class DrafterMethod(Protocol):
    """One speculative method: the members every method class has (drafters/registry.py lists them; a method
    with weights has those of drafters.registry.ModelMethod too)."""
    name: str
    trainable: bool  # has weights: a checkpoint, a cold start, training, export, refit
    adaptive: bool  # chooses among other methods' drafters per step instead of drafting itself
    defers: bool  # "auto" may defer its observations while it is idle (engine/pool.py Deferred)

    def engine_drafting(self, spec: "SpecConfig", target, num_slots: int, max_len: int): ...  # (pool, strategy)

    def build(self, spec: "SpecConfig", target, num_slots: int, max_len: int): ...  # its Drafter

    def sim_draft_frac(self, head_frac: float) -> float: ...  # simulator: drafting cost / target forward

    def vllm_config(self, spec: "SpecConfig", ctx) -> dict: ...  # or drafters.vllm.UnsupportedMethod

    def vllm_available(self) -> bool: ...  # this vLLM runs it (for the refusal's list of what runs)

    def vllm_refit(self, model_dir: Path) -> Callable | None: ...  # named weights -> what vLLM's drafter loads


_registry: dict[str, Callable] = {}  # "get": name -> DrafterMethod, "names": () -> tuple (use_registry)


def use_registry(get: Callable[[str], DrafterMethod], names: Callable[[], tuple[str, ...]]) -> None:
    """Called once by specrl.drafters.registry: how the engine finds a method by name."""
    _registry.update(get=get, names=names)


def get_method(name: str | None) -> DrafterMethod:
    """The method object `name` is registered as; an unknown name raises a ValueError listing the valid ones."""
    return _registry["get"](name)


def method_names() -> tuple[str, ...]:
    return _registry["names"]()


def drafting_methods() -> tuple[str, ...]:
    """The methods that draft themselves: what "auto" can choose among."""
    return tuple(n for n in method_names() if not get_method(n).adaptive)


def trainable_methods() -> tuple[str, ...]:
    return tuple(n for n in method_names() if get_method(n).trainable)


def is_adaptive(name: str | None) -> bool:
    """Whether method `name` chooses among other drafters per step ("auto"); False for None (SD off)."""
    return name is not None and get_method(name).adaptive


def __getattr__(name: str):
    # the registry's lists, read when asked (the registry is filled after this module is imported)
    lists = {"METHODS": method_names, "DRAFTING_METHODS": drafting_methods, "TRAINABLE_METHODS": trainable_methods}
    if name in lists:
        return lists[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        methods, drafting = method_names(), drafting_methods()
        require(self.method is None or self.method in methods, "method", self.method,
                f"one of {list(methods)}", "or method=None to turn SD off")
        require(self.adaptive_mode in ADAPTIVE_MODES, "adaptive_mode", self.adaptive_mode,
                f"one of {list(ADAPTIVE_MODES)}")
        require(bool(self.drafters) and all(d in drafting for d in self.drafters), "drafters",
                list(self.drafters), f"at least one of {list(drafting)} (the drafters 'auto' can choose "
                "among), each")
        require(1 <= self.num_speculative_tokens <= MAX_SPEC_TOKENS, "num_speculative_tokens",
                self.num_speculative_tokens, f"in [1, {MAX_SPEC_TOKENS}]")
        require(1 <= self.ngram_min <= self.ngram_max, "ngram_min", self.ngram_min,
                f"in [1, ngram_max={self.ngram_max}]")

    @property
    def enabled(self) -> bool:
        return self.method is not None


def model_method(spec: SpecConfig, what: str = "draft_model='scratch'") -> str:
    """The model drafter `spec` runs ("auto" resolves to the drafter it wraps); an error for model-free ones.
    Here, torch-free, so that config validation (rollout.drafter.online) reads it without the drafters."""
    method, adaptive, trainable = spec.method, is_adaptive(spec.method), trainable_methods()
    if adaptive:
        method = next((d for d in spec.drafters if d in trainable), None)
    if method not in trainable:
        over = f" ({spec.method} over {list(spec.drafters)})" if adaptive else ""
        raise ValueError(f"{what} needs a model drafter, but method={spec.method!r}{over} has no weights: use "
                         f"method in {list(trainable)} (or add one to drafters, e.g. drafters=('suffix', "
                         f"'eagle3')), or drop {what}")
    return method


def build_drafter(spec: SpecConfig, target, num_slots: int, max_len: int):
    """The Drafter of `spec.method` (draft_model="scratch": started from the policy)."""
    method = get_method(spec.method)
    if spec.draft_model == SCRATCH and not method.trainable:
        model_method(spec)  # a model-free method: a clear error
    return method.build(spec, target, num_slots, max_len)
