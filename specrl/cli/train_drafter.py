"""`specrl train-drafter --method eagle3|draft_model|mtp --out DIR [--model DIR] [key=value ...]`: offline
self-distillation. Every setting below is a flag (`--steps 100`) or, the same, a `key=value` override (`steps=100`).
`--out` is required: the shipped drafter (specrl/tasks/assets/drafters/METHOD) is replaced only when its path is
passed as `--out`.

step 1: sample the policy's own responses (SD off, `temperature`, default 1) to embedded-task prompts, or with
        `data=FILE` to a JSONL file's `prompt` strings / chat `messages` (see drafters/training/data.py load_prompts);
        with `cache=DIR` they are read from there when a run with this policy and these settings wrote them
        (drafters/training/cache.py), and the teacher outputs and the fit's state are kept there too;
step 2: hand them to the method's trainer, `train(policy_path, out_dir, data, args) -> dict` (`resume=true`:
        continue the fit saved in the cache);
step 3: print the metrics as one JSON line (also written to DIR/train_metrics.json).
"""
from __future__ import annotations

import functools
import inspect
import json
import re
import sys
import time
from dataclasses import dataclass, fields, is_dataclass, make_dataclass, replace
from pathlib import Path

import yaml

from ..config import ConfigError, load_config, require, to_dict
from ..config.files import argv_overrides
from ..drafters.training.cache import digest_files, load_or_collect
from ..drafters.training.data import DrafterTrainArgs, collect_sequences, default_prompts
from ..drafters.training.data import load_prompts
from ..engine.memory import DEFAULT_MEMORY_UTILIZATION
from ..engine.methods import get_method, trainable_methods
from ..config.renamed import rename
from ..runtime import policy_path


@dataclass
class SharedSettings:
    """`specrl train-drafter`'s `key=value` settings that every method shares, as `specrl train` takes them
    (`--key value` too); each method's own are its class's `train_settings` (`TrainDrafterConfig` joins them)."""
    method: str | None = None  # required: a method with weights (draft_model, eagle3, mtp)
    model: str | None = None  # policy checkpoint dir; null: the embedded policy
    out: str | None = None  # required: the drafter's output dir
    # step 1, sampling
    data: str | None = None  # JSONL of `prompt` or `messages` rows; null: the embedded task
    prompts: int | None = None  # prompts sampled; null: 512 embedded-task ones, or every data row
    samples: int = 2  # responses per prompt
    max_tokens: int = 256  # response tokens at most
    # of the training responses (0: greedy, for a drafter serving greedy decoding); the teacher targets are
    # the policy's distribution at temperature 1 either way
    temperature: float = 1.0
    max_model_len: int | None = None  # prompt + response cap and KV-cache length; null: the policy's
    max_num_seqs: int = 64  # sequences sampled at once
    kv_cache_memory: int | str | None = None  # sampling engine's KV budget, e.g. 2GiB; null: memory_utilization
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION  # free-memory share of the KV cache without kv_cache_memory
    seed: int = 0  # sampling and initialisation seed
    threads: int | None = None  # torch CPU threads; null: the free cores
    # step 2, the fit (DrafterTrainArgs)
    steps: int = DrafterTrainArgs.steps  # optimizer steps (the schedule ends at steps or time_budget)
    lr: float = DrafterTrainArgs().optim.lr  # peak learning rate (linear warmup, then cosine decay)
    batch_tokens: int = DrafterTrainArgs.batch_tokens  # tokens per optimizer step
    time_budget: float = DrafterTrainArgs.time_budget_s  # training seconds
    teacher_topk: int = DrafterTrainArgs.teacher_topk  # eagle3: stored teacher tokens a position (0: all)
    cache: str | None = None  # teacher-data cache dir (step 1); it also keeps the fit's state for `resume`
    resume: bool = False  # continue the fit saved in `cache` (same method, draft vocabulary and steps)

    MOVED = {"eagle3_ttt_steps": ".ttt_steps"}

    def validate(self) -> None:
        require(self.method in trainable_methods(), "method", self.method, f"one of {list(trainable_methods())}",
                "the other speculative methods have no weights to train")


def parse_args(argv: list[str] | None) -> SharedSettings:
    argv = rename(list(sys.argv[1:] if argv is None else argv), RENAMED, "specrl train-drafter")
    if "-h" in argv or "--help" in argv:
        print(__doc__ + "\nsettings (`--key value` or `key=value`; default, then what it sets):\n" + settings_help())
        raise SystemExit(0)
    return load_config(config_class(), None, argv_overrides(argv))


RENAMED = {"policy": "model", "--policy": "--model"}


def config_class() -> type:
    """The settings every method shares, then each trainable method's own (`train_settings`, in the order the
    registry lists them): a new method's settings join by its class alone."""
    own = []
    for name in trainable_methods():
        method = get_method(name)
        if "train_settings" not in vars(type(method)):
            raise TypeError(f"method {name!r} has weights but its class {type(method).__name__} does not say its "
                            "`specrl train-drafter` settings: set train_settings to a dataclass, or None")
        own.append(method.train_settings)
    return _joined(tuple(s for s in own if s is not None))


@functools.cache
def _joined(own: tuple[type, ...]) -> type:
    seen: dict[str, str] = {f.name: "the shared settings" for f in fields(SharedSettings)}
    for cls in own:
        for f in fields(cls):
            if f.name in seen:
                raise TypeError(f"train-drafter setting {f.name!r} of {cls.__name__} is also one of {seen[f.name]}: "
                                "give it its method's prefix")
            seen[f.name] = cls.__name__
    # a dataclass's fields come from its bases in reverse order: the shared ones first
    return make_dataclass("TrainDrafterConfig", [], bases=(*reversed(own), SharedSettings))


def __getattr__(name: str):
    if name == "TrainDrafterConfig":  # built from the registry when asked (a test may register a method)
        return config_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def field_help(cls: type) -> dict[str, str]:
    """Each field's comment in the source of `cls` and of the dataclasses it joins: the one on its line, else the
    comment lines just above it."""
    helps: dict[str, str] = {}
    for base in cls.__mro__:
        if is_dataclass(base) and base.__name__ != "TrainDrafterConfig":
            helps = {**_source_help(base), **helps}
    return helps


def _source_help(cls: type) -> dict[str, str]:
    helps, above = {}, []
    for line in inspect.getsource(cls).splitlines():
        code, _, comment = line.strip().partition("#")
        field = re.match(r"(\w+): ", code)
        if field:
            helps[field.group(1)] = comment.strip() or " ".join(above)
            above = []
        else:
            above = above + [comment.strip()] if not code and comment else []
    return helps


def settings_help() -> str:
    cls = config_class()
    helps, defaults = field_help(cls), to_dict(cls())
    return "\n".join(f"  --{k.replace('_', '-'):<22} {yaml.safe_dump(v).strip().removesuffix('...').strip():<8} "
                     f"{helps.get(k, '')}" for k, v in defaults.items())


def default_out(method: str) -> Path:
    return get_method(method).shipped_dir


def sampling_settings(ns: SharedSettings) -> dict:
    """What the sampled responses depend on besides the policy (the cache's key)."""
    return {"data": digest_files([Path(ns.data)]) if ns.data else "embedded task", "prompts": ns.prompts,
            "samples": ns.samples, "max_tokens": ns.max_tokens, "temperature": ns.temperature, "seed": ns.seed,
            "max_model_len": ns.max_model_len}


def collect(ns: SharedSettings, policy: str) -> list:
    prompts = (load_prompts(ns.data, policy, ns.prompts) if ns.data
               else default_prompts(512 if ns.prompts is None else ns.prompts, ns.seed))
    return collect_sequences(policy, prompts, n=ns.samples, max_tokens=ns.max_tokens, temperature=ns.temperature,
                             seed=ns.seed, max_num_seqs=ns.max_num_seqs, max_model_len=ns.max_model_len,
                             kv_cache_memory=ns.kv_cache_memory, memory_utilization=ns.memory_utilization)


def main(argv: list[str] | None = None) -> int:
    run(argv)
    return 0


def run(argv: list[str] | None = None) -> dict:
    """Collect, train, save; returns the metrics."""
    ns = parse_args(argv)
    if ns.out is None:
        raise ConfigError(f"pass --out DIR for the new {ns.method} drafter; to replace the shipped one, pass its "
                          f"path explicitly: --out {default_out(ns.method)}")
    # the method's train(policy_path, out_dir, data, args), its own options bound (drafters/<method>/method.py)
    train = get_method(ns.method).cli_train(
        ns, on_log=lambda step, row: print(json.dumps({"step": step, **row}), file=sys.stderr, flush=True))
    from ..threads import set_threads
    set_threads(ns.threads)
    policy = policy_path(ns.model, "--model DIR")
    out = Path(ns.out)
    args = DrafterTrainArgs(steps=ns.steps, batch_tokens=ns.batch_tokens, seed=ns.seed, time_budget_s=ns.time_budget,
                            teacher_topk=ns.teacher_topk, optim=replace(DrafterTrainArgs().optim, lr=ns.lr),
                            cache_dir=ns.cache, resume=ns.resume)
    t0 = time.monotonic()
    data, cached = load_or_collect(ns.cache, policy, sampling_settings(ns), lambda: collect(ns, policy))
    collect_s = time.monotonic() - t0
    print(f"{'read' if cached else 'collected'} {len(data)} responses ({sum(len(r) for _, r in data)} tokens) in "
          f"{collect_s:.1f}s", file=sys.stderr)
    metrics = {"collect_s": round(collect_s, 1), "cached": cached, **train(policy, out, data, args)}
    (out / "train_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(json.dumps(metrics))
    return metrics
