"""`specrl pretrain --out DIR [key=value ...]`: build the embedded base policy.

    specrl pretrain --out DIR seed=1 stages.chains.steps=1000 stages.chains.optim.lr=1e-3

`key=value` overrides (as `specrl train` takes them) set the fields of `PretrainConfig`; `stages.NAME.FIELD`
sets a field of one stage of the recipe (`specrl.tasks.pretrain.STAGES`). Prints the recipe record as one
JSON line. `--out` is required: the shipped policy (specrl/tasks/assets/policy) is replaced only when its path is
passed as `--out`.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..config import ConfigError, from_dict, to_dict, validate_config
from ..config.files import apply_overrides, argv_overrides


def parse_args(argv: list[str] | None):
    """(out dir, PretrainConfig): the default recipe with the `key=value` overrides applied, its stages
    addressed by name (`stages.chains.steps=...`)."""
    from ..tasks import POLICY_DIR
    from ..tasks.pretrain import PretrainConfig, Stage

    p = argparse.ArgumentParser(prog="specrl pretrain", description=__doc__, usage="%(prog)s --out DIR [key=value ...]",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None, help="output directory (required; the shipped policy is "
                   "specrl/tasks/assets/policy)")
    args, overrides = p.parse_known_args(argv)  # the rest, in order: key=value, e.g. stages.chains.steps=1000
    data = to_dict(PretrainConfig())
    names = [st["name"] for st in data["stages"]]
    data["stages"] = dict(zip(names, data["stages"]))
    apply_overrides(PretrainConfig, data, argv_overrides(overrides))
    for name, stage in data["stages"].items():
        if name not in names:
            raise ConfigError(f"stages.{name} is not a stage of the recipe: expected one of {names}, e.g. "
                              "stages.chains.steps=1000")
        data["stages"][name] = from_dict(Stage, stage, f"stages.{name}")
    cfg = from_dict(PretrainConfig, {**data, "stages": list(data["stages"].values())})
    validate_config(cfg)
    if args.out is None:  # after the settings, so that a bad setting is named first
        raise ConfigError(f"pass --out DIR for the new policy; to replace the shipped one, pass its path "
                          f"explicitly: --out {POLICY_DIR}")
    return args.out, cfg


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from ..tasks.pretrain import pretrain

    out, cfg = parse_args(argv)
    console = Console(stderr=True)
    with Progress(TextColumn("pretrain {task.fields[stage]}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console) as bar:
        tasks = {st.name: bar.add_task("train", total=st.end, stage=st.name, info="") for st in cfg.stages}

        def on_step(stage: str, step: int, m: dict) -> None:
            info = f"loss {m['loss']:.3f} lr {m['lr']:.2e} {m['elapsed_s']:.0f}s"
            bar.update(tasks[stage], completed=step, info=info)

        record = pretrain(out, cfg, on_step)
    summary = {k: record[k] for k in ("steps_done", "train_s", "eval_s", "heldout_accuracy", "heldout_counted_share",
                                      "heldout_accuracy_by_ops", "response_length_tokens", "num_params")}
    console.print(f"wrote {out}")
    print(json.dumps(summary))
    return 0
