"""One RL rollout of the default config through `auto` (what `specrl bench adaptive` runs as "rl"), its
per-step choices written as JSON lines and plotted with the bench's own plot.

    python experiments/adaptive_rl_choices.py DTYPE MAX_TOKENS OUT_PREFIX   # -> OUT_PREFIX.jsonl, .png
"""
import json, sys, time
import torch
torch.set_num_threads(1)
from specrl import LLM, SamplingParams, SpecConfig
from benchmarks.common import policy_path, task_prompts
from benchmarks.adaptive import plot
from specrl.engine.stats import Choices
from specrl.train.config import TrainConfig
dtype, max_tokens, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ro = TrainConfig().rollout
path = policy_path(None)
llm = LLM(path, dtype=dtype, max_num_seqs=ro.max_num_seqs,
          spec=SpecConfig(method="auto", num_speculative_tokens=8, drafters=("suffix", "ngram", "eagle3")))
prompts = task_prompts(llm, ro.prompts_per_step, seed=7, split="train")
warm = task_prompts(llm, ro.prompts_per_step, seed=8, split="train")
llm.generate(warm, [SamplingParams(n=ro.n, temperature=1.0, max_tokens=64, seed=99 + i) for i in range(len(warm))])
choices = llm.engine.choices = Choices()
choices.history = []
t = time.perf_counter()
params = [SamplingParams(n=ro.n, temperature=1.0, max_tokens=max_tokens, seed=i) for i in range(len(prompts))]
outs = llm.generate(prompts, params)
dt = time.perf_counter() - t
toks = sum(len(o.token_ids) for q in outs for o in q.outputs)
with open(out + ".jsonl", "w") as f:
    f.writelines(json.dumps(h) + "\n" for h in choices.history)
print(json.dumps({"dtype": dtype, "tokens": toks, "seconds": dt, "tokens_per_s": toks / dt, "steps": len(choices.history)}))
plot([], choices.history, out + ".png", dtype)
