"""`specrl pretrain --out DIR [--seed S] [--stage chains.steps=1000 ...]`: build the embedded base policy.

Flags set the top-level fields of `PretrainConfig`; `--stage NAME.FIELD=VALUE` (repeatable) sets a field of
one stage of the recipe (`specrl.tasks.pretrain.STAGES`). Prints the recipe record as one JSON line.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from ..errors import UserError


def _bool(text: str) -> bool:
    return text.lower() in ("1", "true", "yes")


def parse_args(argv: list[str] | None):
    from ..tasks import POLICY_DIR
    from ..tasks.pretrain import PretrainConfig

    p = argparse.ArgumentParser(prog="specrl pretrain", description="Train the embedded base policy.")
    p.add_argument("--out", type=Path, default=POLICY_DIR, help=f"output directory (default {POLICY_DIR})")
    p.add_argument("--stage", action="append", default=[], metavar="NAME.FIELD=VALUE",
                   help="override one stage's field, e.g. --stage chains.steps=1000 (repeatable)")
    defaults = PretrainConfig()
    for f in dataclasses.fields(PretrainConfig):
        if f.name == "stages":
            continue
        default = getattr(defaults, f.name)
        kind = _bool if isinstance(default, bool) else (str if default is None else type(default))
        p.add_argument("--" + f.name.replace("_", "-"), type=kind, default=default,
                       metavar="BOOL" if kind is _bool else None)
    moved = [a for a in argv or [] if a.split("=")[0] in ("--weight-decay", "--grad-clip")]
    if moved:
        flag = moved[0].split("=")[0]
        raise UserError(f"specrl pretrain {flag} is gone: each stage has its own optimizer settings, e.g. --stage "
                        f"chains.optim.{flag[2:].replace('-', '_')}=VALUE (repeat it for each stage)")
    args = vars(p.parse_args(argv))
    out, overrides = args.pop("out"), args.pop("stage")
    return out, PretrainConfig(stages=override_stages(defaults.stages, overrides), **args)


def override_stages(stages, overrides: list[str]):
    """`stages` with each "NAME.FIELD=VALUE" (or "NAME.optim.FIELD=VALUE") applied; an unknown stage or field
    is a UserError naming it."""
    from ..optim import OptimSettings
    by_name = {st.name: st for st in stages}
    stage_fields = [f.name for f in dataclasses.fields(type(stages[0])) if f.name not in ("name", "optim")]
    optim_fields = [f.name for f in dataclasses.fields(OptimSettings)]
    for text in overrides:
        key, sep, value = text.partition("=")
        name, dot, field = key.partition(".")
        if name in by_name and field in optim_fields:
            raise UserError(f"--stage {text!r}: the stage's optimizer settings moved to its optim: use --stage "
                            f"{name}.optim.{field}={value}")
        if not (sep and dot) or name not in by_name or field not in stage_fields + [f"optim.{f}" for f in optim_fields]:
            raise UserError(f"--stage {text!r}: expected NAME.FIELD=VALUE with NAME one of {list(by_name)} and "
                            f"FIELD one of {stage_fields} or optim.{{{','.join(optim_fields)}}}, e.g. --stage "
                            "chains.steps=1000 or --stage chains.optim.lr=1e-3")
        owner = by_name[name].optim if field.startswith("optim.") else by_name[name]
        leaf = field.removeprefix("optim.")
        current = getattr(owner, leaf)
        try:
            parsed = (None if value.lower() in ("none", "null") else
                      tuple(float(v) for v in value.strip("()[]").split(",")) if isinstance(current, tuple) else
                      type(current or 0)(value))
        except ValueError:
            raise UserError(f"--stage {text!r}: {value!r} is not a {type(current).__name__}") from None
        if owner is by_name[name]:
            by_name[name] = dataclasses.replace(owner, **{leaf: parsed})
        else:
            by_name[name] = dataclasses.replace(by_name[name], optim=dataclasses.replace(owner, **{leaf: parsed}))
    return tuple(by_name[st.name] for st in stages)


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
