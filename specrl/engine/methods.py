"""Speculative-decoding settings (`SpecConfig`, the `spec=` argument of `LLM`) and what the engine asks of a
drafter method (`DrafterMethod`).

Each method is one class in its own folder, `specrl/drafters/<method>/method.py`, listed once in
`specrl/drafters/registry.py`. The engine sits below the drafters, so it never imports them: the registry hands
its lookup to `use_registry` when `specrl` is imported (specrl/__init__.py), and `get_method` asks it. Torch-free,
so light commands (e.g. `specrl simulate`) read the names without importing torch.
"""
from __future__ import annotations

from dataclasses import InitVar, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, ClassVar, Protocol

from ..errors import require

# The longest draft a step may verify: the spare positions of every KV cache and the slots of the per-position
# acceptance counters, one limit for all.
MAX_SPEC_TOKENS = 16

# one subdirectory per model-based method (`specrl train-drafter` default)
SHIPPED_DRAFTERS_DIR = Path(__file__).resolve().parents[1] / "tasks" / "assets" / "drafters"

SCRATCH = "scratch"  # cold start: spec.draft_model="scratch" builds the drafter from the policy
ADAPTIVE_MODES = ("measured", "deterministic")
# SpecConfig's flat keys before each method had its options, in the order of its InitVars (one release)
OLD_FLAT_KEYS = ("ngram_min", "ngram_max", "suffix_scale", "drafters", "adaptive_mode", "cost_profile")


class DrafterMethod(Protocol):
    """One speculative method: the members every method class has (drafters/registry.py lists them; a method
    with weights has those of drafters.registry.ModelMethod too)."""
    name: str
    trainable: bool  # has weights: a checkpoint, a cold start, training, export, refit
    adaptive: bool  # chooses among other methods' drafters per step instead of drafting itself
    defers: bool  # "auto" may defer its observations while it is idle (engine/pool.py Deferred)
    options: type | None  # its own options dataclass (`rollout.spec.<name>`), or None

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
    # each method's own options by its name (`rollout.spec.ngram.max=8`, `spec.options["ngram"].max`): the
    # dataclass its class declares (`options`, drafters/<m>/method.py), defaults for those not given
    options: dict[str, Any] = field(default_factory=dict)
    SECTIONS_FIELD: ClassVar[str] = "options"
    # the flat keys those options replaced, read for one release (their method's `options.OLD_KEYS`)
    ngram_min: InitVar[int | None] = None
    ngram_max: InitVar[int | None] = None
    suffix_scale: InitVar[float | None] = None
    drafters: InitVar[tuple[str, ...] | None] = None
    adaptive_mode: InitVar[str | None] = None
    cost_profile: InitVar[str | None] = None

    # keys that no longer exist and what replaced them, for a clear error on an old config
    REMOVED = {
        "auto_max_batch": "'auto' no longer turns SD off above a fixed batch size: its cost model, measured on "
                          "this machine during the run, decides per step whether drafting pays (see rollout.spec."
                          "auto.mode); delete the key",
        "auto_methods": "'auto' now chooses per sequence among `auto.drafters` (default suffix, ngram, eagle3): "
                        "rename auto_methods to auto.drafters",
    }

    def __post_init__(self, *old):
        given = {k: v for k, v in zip(OLD_FLAT_KEYS, old) if v is not None}
        options = {}
        for name, cls in self.sections().items():  # a mapping, an instance or nothing: its dataclass
            own = self.options.get(name) or {}
            own = own if isinstance(own, cls) else cls(**own)
            moved = {new: given[key] for key, new in cls.OLD_KEYS.items() if key in given}
            options[name] = replace(own, **moved) if moved else own  # never edits a caller's instance
        self.options = {**self.options, **options}  # a name without options stays, for validate's error
        self.validate()  # also when built in Python, LLM(spec=SpecConfig(...))

    @classmethod
    def sections(cls) -> dict[str, type]:
        """Method name -> its options dataclass, for the methods that have one."""
        return {n: get_method(n).options for n in method_names() if get_method(n).options is not None}

    @classmethod
    def renamed(cls) -> dict[str, tuple[str, ...]]:
        """Old flat key -> the option keys it sets now ("ngram_max" -> ("ngram.max", "suffix.max"))."""
        out: dict[str, tuple[str, ...]] = {}
        for name, options in cls.sections().items():
            for old, new in options.OLD_KEYS.items():
                out[old] = out.get(old, ()) + (f"{name}.{new}",)
        return out

    def validate(self) -> None:
        methods = method_names()
        require(self.method is None or self.method in methods, "method", self.method,
                f"one of {list(methods)}", "or method=None to turn SD off")
        require(1 <= self.num_speculative_tokens <= MAX_SPEC_TOKENS, "num_speculative_tokens",
                self.num_speculative_tokens, f"in [1, {MAX_SPEC_TOKENS}]")
        require(set(self.options) <= set(self.sections()), "options", sorted(self.options),
                f"options of {sorted(self.sections())}", "each key is a method with options of its own")
        for options in self.options.values():
            options.validate()

    @property
    def enabled(self) -> bool:
        return self.method is not None


def model_method(spec: SpecConfig, what: str = "draft_model='scratch'") -> str:
    """The model drafter `spec` runs ("auto" resolves to the drafter it wraps); an error for model-free ones.
    Here, torch-free, so that config validation (rollout.drafter.online) reads it without the drafters."""
    method, adaptive, trainable = spec.method, is_adaptive(spec.method), trainable_methods()
    drafters = spec.options[spec.method].drafters if adaptive else ()
    if adaptive:
        method = next((d for d in drafters if d in trainable), None)
    if method not in trainable:
        over = f" ({spec.method} over {list(drafters)})" if adaptive else ""
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
