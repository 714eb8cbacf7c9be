"""Writes the adaptive engine's shipped profile for the embedded policy (tasks/assets/profiles/): an `auto`
engine over every shipped drafter first drafts with each model drafter alone and in each hybrid on a few
held-out prompts (so every drafter has acceptance counts at every draft position), then chooses freely on
small batches and one rollout of the default run (prompts_per_step x n through max_num_seqs slots, the task's
budget), and saves what it learnt (engine/adaptive/profile.py): the acceptance counts only, which are
clock-free. Its cost fits and rate checks are left out: run next to other jobs (at low priority) they priced
every step many times too slow, and a drafter's fit, loaded against a freshly calibrated target, made
drafting look dear (auto then chose no draft at a full batch, docs/results/bench_adaptive.md run 6).

    python experiments/adaptive_profile.py [DTYPE] [OUT]      # default float32, the shipped path
"""
import json
import sys
from pathlib import Path

from specrl import LLM, SamplingParams, SpecConfig
from benchmarks.common import task_prompts
from specrl.engine.adaptive import profile
from specrl.engine.methods import DRAFTING_METHODS
from specrl.tasks import default_policy_path
from specrl.threads import set_threads
from specrl.train.config import TrainConfig

K = 8  # the longest draft `specrl bench adaptive` asks by default; shorter ones read the same counts


def generate(llm, batch: int, tokens: int, seed: int) -> None:
    prompts = task_prompts(llm, batch, seed=seed)
    llm.generate(prompts, [SamplingParams(temperature=1.0, max_tokens=tokens, seed=seed + i) for i in range(batch)])


def main(dtype: str = "float32", out: str | None = None) -> None:
    set_threads(1)
    cfg = TrainConfig()
    ro = cfg.rollout
    spec = SpecConfig(method="auto", num_speculative_tokens=K, drafters=DRAFTING_METHODS)
    llm = LLM(default_policy_path(), dtype=dtype, spec=spec, max_num_seqs=ro.max_num_seqs)
    strategy = llm.engine.strategy
    every = list(strategy.arms)
    for i, arm in enumerate(a for a in every if a.k == K and a.drafter not in strategy.point):
        strategy.arms = [arm]  # each model drafter alone and filling in for each model-free lead
        generate(llm, 8, 64, seed=5000 + 10 * i)
    strategy.arms = every
    for batch in (1, 4, 16):  # small batches: where a model drafter's long drafts pay
        generate(llm, batch, 128, seed=4242 + batch)
    prompts = task_prompts(llm, ro.prompts_per_step, seed=4343, split="train")
    llm.generate(prompts, [SamplingParams(n=ro.n, temperature=1.0, max_tokens=cfg.budget.max_tokens, seed=i)
                           for i in range(len(prompts))])
    path = out or profile.SHIPPED_DIR / f"auto-{profile.fingerprint(llm.model)['device']}-{dtype}.json"
    profile.save(strategy, path, llm.model, source="experiments/adaptive_profile.py")
    counts_only(path)
    print(f"wrote {path}", file=sys.stderr)


def counts_only(path) -> None:
    """Drops the clock-derived parts (cost fits, rate checks) of a saved profile."""
    state = json.loads(Path(path).read_text())
    for key in ("cost", "checks"):
        state.pop(key, None)
    state["meta"]["contents"] = "acceptance counts only"
    Path(path).write_text(json.dumps(state, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
