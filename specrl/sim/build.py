"""Build a SimConfig from command-line arguments (argparse namespace) with clear errors."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from specrl.config.choices import PIPELINE_MODES, PLACEMENTS
from specrl.engine.methods import get_method, is_adaptive, method_names
from specrl.sim import cost
from specrl.sim.acceptance import AcceptanceModel, fit_geometric, from_acceptance_length
from specrl.engine.adaptive.arms import ALL, FILL, FULL
from specrl.sim.auto import AutoPolicy, PoolDrafter, counts_from_model
from specrl.sim.calibrate import load_trace, with_drafter
from specrl.sim.des import SDSetting
from specrl.sim.hardware import get_hardware
from specrl.sim.models import get_model
from specrl.sim.pipeline import SimConfig
from specrl.sim.workload import Workload, parse_lengths

NO_SD = "none"  # --method none: SD off


def sd_methods() -> tuple[str, ...]:
    """What --method takes: SD off, then every registered method (drafters/registry.py; read without torch)."""
    return (NO_SD, *method_names())


def add_system_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("system")
    g.add_argument("--hardware", default="H100", help="H100 | H200 | B200 | GB200 | cpu-local")
    g.add_argument("--calibration", default=None, help="calibration.json (for cpu-local)")
    g.add_argument("--arch", dest="model", default="qwen3-8b",
                   help="the simulated model: qwen3-8b | qwen3-235b-a22b | a config.json")
    g.add_argument("--gpus", type=int, default=64, help="GPUs in the cluster")
    g.add_argument("--tp", type=int, default=1, help="tensor parallel size of a rollout replica")
    g.add_argument("--mode", default="sync", choices=PIPELINE_MODES, help="RL pipeline: sync or async")
    g.add_argument("--placement", default=None, choices=PLACEMENTS,
                   help="as ray.placement of `specrl train pipeline.backend=ray`: colocated (rollout and training "
                        "share the GPUs) or split; default: colocated for sync, split for async")
    g.add_argument("--rollout-frac", type=float, default=0.5, help="split placement: share of GPUs for rollout")
    g.add_argument("--max-lag", type=int, default=1, help="async: policy versions a rollout may lag")
    g.add_argument("--per-step-batches", action="store_true",
                   help="async: generate each step's batch on its own (specrl's in-process async pipeline) "
                        "instead of streaming lag+1 steps through continuous batching")
    g.add_argument("--mfu", type=float, default=None,
                   help="training MFU (default: the calibration's fitted value, else 0.35)")
    g.add_argument("--max-num-seqs", type=int, default=256, help="sequences a rollout replica decodes at once")
    g.add_argument("--seed", type=int, default=0, help="seed of the sampled lengths and acceptances")
    w = p.add_argument_group("workload")
    w.add_argument("--num-prompts", dest="prompts", type=int, default=512, help="prompts per step")
    w.add_argument("--n", type=int, default=16, help="samples per prompt (GRPO group)")
    w.add_argument("--prompt-len", type=int, default=1024, help="prompt tokens")
    w.add_argument("--lengths", default="lognormal:4000,0.7",
                   help="lognormal:MEDIAN,SIGMA | list:L1,L2,... | lengths file / run dir")
    w.add_argument("--max-tokens", type=int, default=16384, help="response tokens at most")
    s = p.add_argument_group("speculative decoding")
    s.add_argument("--method", dest="sd_method", default="eagle3", choices=sd_methods(),
                   help="speculative decoding method ('none': SD off; 'auto': the adaptive engine's choice of "
                        "drafter and k per iteration, among --auto-drafters)")
    s.add_argument("--k", type=int, default=3, help="draft tokens per step")
    s.add_argument("--acceptance-length", type=float, default=3.0, help="mean tokens per step")
    s.add_argument("--acceptance", default=None, help="per-position acceptance, e.g. 0.9,0.8,0.7")
    s.add_argument("--acceptance-trace", default=None, help="engine trace JSONL to fit it from")
    s.add_argument("--draft-frac", type=float, default=None,
                   help="drafter forward cost / target forward (default: by method)")
    s.add_argument("--auto-drafters", default=None,
                   help="auto: the drafters it chooses among, comma-separated (default: the profile's, else eagle3)")
    s.add_argument("--proposal-share", type=float, default=1.0,
                   help="auto without a profile: the share of rows a model-free drafter finds a match for (it then "
                        "proposes k tokens, accepted as --acceptance*; nothing on the other rows)")
    s.add_argument("--auto-profile", default=None,
                   help="auto: the adaptive engine's saved profile (`specrl bench adaptive --save-profile`), whose "
                        "acceptance counts per drafter replace --acceptance* (k up to --k)")
    s.add_argument("--no-drafter-train", action="store_true", help="leave out the online drafter's training cost")


def acceptance_from_args(a: argparse.Namespace) -> AcceptanceModel:
    if a.acceptance:
        return AcceptanceModel(tuple(float(x) for x in a.acceptance.split(",")))
    if a.acceptance_trace:
        rows = [r for r in load_trace(a.acceptance_trace) if r.get("phase") == "spec"]
        if not rows:
            raise ValueError(f"trace {a.acceptance_trace!r} has no SD steps (phase 'spec'); record "
                             "it with a SpecConfig, or pass --acceptance-length")
        k = int(max(r["k"] for r in rows))
        return fit_geometric(np.array([r["accepted_tokens"] for r in rows]),
                             np.array([r["active"] for r in rows]), k)
    return from_acceptance_length(a.acceptance_length, a.k)


def default_draft_frac(method: str, model) -> float:
    # the method says what drafting costs, in units of one decoder layer and the lm_head (an EAGLE-3 head)
    return get_method(method).sim_draft_frac(cost.eagle_draft_frac(model))


def drafter_cost(method: str, hw, calib: dict | None, model, draft_frac: float | None):
    """The hardware with `method`'s fitted drafter overheads and its draft_frac: --draft-frac, else the
    calibration's fit of that method, else what the method's class says (`sim_draft_frac`)."""
    fitted = None
    if calib is not None and method in calib.get("drafters", {}):
        hw, fitted = with_drafter(hw, calib, method)
    if draft_frac is None:
        draft_frac = fitted if fitted is not None else default_draft_frac(method, model)
    return hw, draft_frac


def auto_from_args(a: argparse.Namespace, hw, calib: dict | None, model) -> AutoPolicy:
    """auto's pool (each drafter's cost) and its acceptance counts: the profile's, else --acceptance* for all."""
    profile = read_auto_profile(a.auto_profile) if a.auto_profile else None
    names = (a.auto_drafters.split(",") if a.auto_drafters else
             profile["meta"]["drafters"] if profile else ["eagle3"])
    bad = [n for n in names if n not in method_names() or is_adaptive(n)]
    if bad:
        drafting = [n for n in method_names() if not is_adaptive(n)]
        raise ValueError(f"--auto-drafters {bad} invalid: expected drafting methods among {drafting}")
    pool = {}
    for n in names:
        hw_n, frac = drafter_cost(n, hw, calib, model, a.draft_frac)
        pool[n] = PoolDrafter(hw_n, frac, point=not get_method(n).trainable)
    if profile is not None:
        stats = {tuple(key): state for key, state in profile["stats"]}
    else:
        if not 0.0 < a.proposal_share <= 1.0:
            raise ValueError(f"--proposal-share {a.proposal_share} is invalid: expected a share in (0, 1]")
        acc = acceptance_from_args(a)
        stats = {}
        for n, d in pool.items():  # a model-free drafter's full-length matches are its FULL rows
            stats[n, ALL] = counts_from_model(acc, a.k, a.proposal_share if d.point else 1.0)
            stats[n, FULL if d.point else FILL] = counts_from_model(acc, a.k)
    return AutoPolicy(pool, stats, a.k)


def read_auto_profile(path: str) -> dict:
    """A profile of the adaptive engine (engine/adaptive/profile.py) that carries acceptance counts."""
    from specrl.engine.adaptive.cost_model import STRATEGY_PROFILE_VERSION, read_profile
    s = read_profile(path)
    if s.get("version") != STRATEGY_PROFILE_VERSION or "stats" not in s:
        raise ValueError(f"--auto-profile {path!r} carries no acceptance counts (a cost-model profile of version "
                         f"{s.get('version')}): write one with `specrl bench adaptive --save-profile PATH`")
    s.setdefault("meta", {}).setdefault("drafters", sorted({key[0] for key, _ in s["stats"]}))
    return s


def config_from_args(a: argparse.Namespace) -> SimConfig:
    hw = get_hardware(a.hardware, a.calibration)
    model = get_model(a.model)
    calib = None
    if a.hardware == "cpu-local" or a.calibration:  # get_hardware has checked that the file exists
        calib = json.loads(Path(a.calibration or "calibration.json").read_text())
    mfu = a.mfu if a.mfu is not None else (calib or {}).get("pipeline", {}).get("mfu", 0.35)
    sd = None
    if is_adaptive(a.sd_method):
        auto = auto_from_args(a, hw, calib, model)
        sd = SDSetting(acceptance_from_args(a), max(d.draft_frac for d in auto.pool.values()), auto=auto)
    elif a.sd_method != NO_SD:
        hw, draft_frac = drafter_cost(a.sd_method, hw, calib, model, a.draft_frac)
        sd = SDSetting(acceptance_from_args(a), draft_frac)
    workload = Workload(a.prompts, a.n, a.prompt_len, parse_lengths(a.lengths), a.max_tokens)
    colocated = (a.placement or ("colocated" if a.mode == "sync" else "split")) == "colocated"
    return SimConfig(hw, model, workload, a.gpus, a.tp, a.mode, a.max_lag, colocated,
                     a.rollout_frac, sd, mfu, a.max_num_seqs, not a.no_drafter_train, a.seed,
                     stream=not a.per_step_batches)
