"""Frontier-scale projections: Qwen3-8B and Qwen3-235B-A22B, sync/async x SD on/off, 64-2048 GPUs,
beside the numbers NeMo-RL published."""
from __future__ import annotations

from dataclasses import dataclass, replace

from specrl.sim import cost
from specrl.sim.acceptance import from_acceptance_length
from specrl.sim.des import SDSetting
from specrl.sim.hardware import get_hardware
from specrl.sim.models import get_model
from specrl.sim.pipeline import SimConfig, simulate_step
from specrl.sim.workload import Lognormal, Workload

PROJECTED_GPUS = (64, 512, 2048)  # the cluster sizes of the projection table (sweep.GPU_COUNTS: the sweep)
ASYNC_SPLITS = (0.5, 0.75)  # async: best share of GPUs given to rollout


@dataclass(frozen=True)
class Scenario:
    model: str
    tp: int
    nemo: dict  # published NeMo-RL numbers for this model


SCENARIOS = (
    Scenario("qwen3-8b", 1, {"sync_rollout": "1.54-1.77x", "sync_e2e": "1.35-1.41x",
                             "setup": "EAGLE-3 k=3, acceptance length 2.77-3.32"}),
    Scenario("qwen3-235b-a22b", 8, {"sync_rollout": "2.72x (512 GPUs)", "sync_e2e": "1.70x (512 GPUs)",
                                    "async_e2e": "~2.5x (simulated)",
                                    "setup": "k=3, acceptance length 3"}),
)

# Reasoning-RL workload (assumption, stated in docs/simulator.md): GRPO with 512 prompts x 16
# samples per step, 1k-token prompts, response lengths log-normal with median 4k and a 16k cap.
WORKLOAD = Workload(prompts_per_step=512, n=16, prompt_len=1024, lengths=Lognormal(4000, 0.7),
                    max_tokens=16384)


def base_config(sc: Scenario, gpus: int, hardware: str = "H100", tau: float = 3.0,
                k: int = 3, workload: Workload = WORKLOAD) -> SimConfig:
    model = get_model(sc.model)
    sd = SDSetting(from_acceptance_length(tau, k), cost.eagle_draft_frac(model))
    return SimConfig(get_hardware(hardware), model, workload, gpus, sc.tp, sd=sd,
                     mfu=0.35 if not model.is_moe else 0.25)


def _best_async(cfg: SimConfig) -> dict:
    runs = [simulate_step(replace(cfg, mode="async", colocated=False, rollout_frac=f))
            for f in ASYNC_SPLITS]
    best = min(range(len(runs)), key=lambda i: runs[i]["step_s"])
    return {**runs[best], "rollout_frac": ASYNC_SPLITS[best]}


def project_cell(sc: Scenario, gpus: int, hardware: str = "H100") -> list[dict]:
    """Four rows for one model and GPU count: sync/async x SD off/on. Rollout speedups compare the
    same GPU split; end-to-end ones each pipeline at its best split."""
    cfg = base_config(sc, gpus, hardware)
    sync_off = simulate_step(replace(cfg, sd=None))
    async_on = _best_async(cfg)
    async_off = _best_async(replace(cfg, sd=None))
    same_split_off = simulate_step(replace(cfg, sd=None, mode="async", colocated=False,
                                           rollout_frac=async_on["rollout_frac"]))
    results = {("sync", False): (sync_off, sync_off), ("sync", True): (simulate_step(cfg), sync_off),
               ("async", False): (async_off, async_off), ("async", True): (async_on, same_split_off)}
    rows = []
    for (mode, sd_on), (r, ref) in results.items():
        rows.append({"model": sc.model, "gpus": gpus, "hardware": hardware, "mode": mode, "placement": r["placement"],
                     "sd": sd_on, "step_s": r["step_s"], "rollout_s": r["rollout_s"],
                     "train_s": r["train_s"], "gen_share": r["gen_share"],
                     "tail_frac": r["tail_frac"], "idle_frac": r["idle_frac"],
                     "rollout_speedup": ref["rollout_s"] / r["rollout_s"],
                     "e2e_speedup_same_mode": results[(mode, False)][0]["step_s"] / r["step_s"],
                     "e2e_speedup_vs_sync_nosd": sync_off["step_s"] / r["step_s"],
                     "rollout_gpus": r["rollout_gpus"], "nemo_rl": _nemo_ref(sc, gpus, mode, sd_on)})
    return rows


def _nemo_ref(sc: Scenario, gpus: int, mode: str, sd_on: bool) -> str:
    if not sd_on:
        return ""
    if mode == "sync" and (sc.model == "qwen3-8b" or gpus == 512):
        return f"rollout {sc.nemo['sync_rollout']}, e2e {sc.nemo['sync_e2e']}"
    return f"e2e {sc.nemo['async_e2e']}" if mode == "async" and "async_e2e" in sc.nemo else ""


def projection_table(hardware: str = "H100", gpus=PROJECTED_GPUS) -> list[dict]:
    return [row for sc in SCENARIOS for g in gpus for row in project_cell(sc, g, hardware)]


def format_table(rows: list[dict]) -> str:
    head = (f"{'model':<16}{'gpus':>5} {'mode':<6}{'SD':<4}{'step s':>8}{'rollout s':>10}"
            f"{'train s':>8}{'gen%':>6}{'tail%':>6}{'rollout x':>10}{'e2e x':>7}{'vs sync':>8}  NeMo-RL")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['model']:<16}{r['gpus']:>5} {r['mode']:<6}{'on' if r['sd'] else 'off':<4}"
                     f"{r['step_s']:>8.0f}{r['rollout_s']:>10.0f}{r['train_s']:>8.0f}"
                     f"{100 * r['gen_share']:>6.0f}{100 * r['tail_frac']:>6.0f}"
                     f"{r['rollout_speedup']:>10.2f}{r['e2e_speedup_same_mode']:>7.2f}"
                     f"{r['e2e_speedup_vs_sync_nosd']:>8.2f}  {r['nemo_rl']}")
    return "\n".join(lines)
