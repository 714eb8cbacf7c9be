"""`specrl train [--config FILE] [--out DIR] [--model DIR] [--method M] [key=value ...]`: GRPO on speculative
rollouts. The flags are the commands' common names for keys of the config tree (`--out` is `out_dir=`, `--model`
`model=`, `--method` `rollout.spec.method=`); every other setting is a `key.sub=value` override.

    specrl train                                   # embedded chain task, shipped base policy
    specrl train --out runs/a max_steps=20         # top-level shortcuts for schedule.max_steps etc.
    specrl train --config configs/default.yaml rollout.spec.method=ngram optim.lr=1e-5
    specrl train resume=runs/a                     # continue from the last checkpoint of runs/a
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..config import ConfigError, load_config
from ..config.files import argv_overrides
from ..config.run import SHORTCUTS, TrainConfig

FLAGS = {"out": "out_dir", "model": "model", "method": "rollout.spec.method"}  # flag -> the config key it sets


def build_config(config_file: str | None, overrides: list[str]) -> TrainConfig:
    """File + overrides; `resume=DIR` starts from DIR's config.yaml so the run continues unchanged."""
    overrides = argv_overrides(overrides, SHORTCUTS)
    resume = [o.split("=", 1)[1] for o in overrides if o.startswith("resume=")]
    if resume and resume[-1].strip().lower() not in ("", "null", "none"):
        run_dir = Path(resume[-1])
        from ..pipeline.run_dir import is_run_dir
        if not is_run_dir(run_dir):
            raise ConfigError(f"resume={str(run_dir)!r} is not a run directory (expected config.yaml and "
                              "metrics.jsonl written by `specrl train`); pass the --out of an earlier run")
        return load_config(TrainConfig, run_dir / "config.yaml", overrides + [f"out_dir={run_dir}"])
    return load_config(TrainConfig, config_file, overrides)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specrl train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="YAML file (see configs/default.yaml)")
    parser.add_argument("--out", metavar="DIR", help="the run directory it writes: config.yaml, metrics.jsonl, "
                        "checkpoints, plots (default: runs/train)")
    parser.add_argument("--model", metavar="DIR", help="the policy's HF checkpoint (default: the shipped policy)")
    parser.add_argument("--method", help="the SD method: auto (default), eagle3, draft_model, mtp, ngram, suffix, "
                        "or null for SD off")
    parser.add_argument("overrides", nargs="*", help="key.sub=value overrides, e.g. optim.lr=1e-5")
    args = parser.parse_intermixed_args(argv)
    from ..pipeline.run import train
    from ..pipeline.seam import RunStopped
    flags = [f"{key}={getattr(args, flag)}" for flag, key in FLAGS.items() if getattr(args, flag) is not None]
    cfg = build_config(args.config, args.overrides + flags)  # a bad config ends in specrl.cli.main's error boundary
    try:
        summary = train(cfg)
    except RunStopped as e:  # not a user error: the run ended early, its directory and checkpoints intact
        print(f"specrl train: stopped: {e}", file=sys.stderr)
        return 1
    print(json.dumps(summary))
    return 0
