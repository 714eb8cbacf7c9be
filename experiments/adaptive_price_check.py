"""Does the adaptive engine's model price its arms right? One generate of B prompts through `auto`, logging per
engine step the arm, the rate the model predicted for it (without the exploration bonus) and the rate the step
realised, the target forward's predicted and measured seconds and the drafting's; then the same prompts with
SD off, and a table per (arm, octave of the running count). It found EAGLE-3's catch-up priced nowhere
(docs/results/bench_adaptive.md, "What changed since run 3").

    python experiments/adaptive_price_check.py B MAX_TOKENS     # e.g. 64 192
"""
import sys, time, torch
torch.set_num_threads(1)
from specrl import LLM, SamplingParams, SpecConfig
from benchmarks.common import policy_path, task_prompts
B = int(sys.argv[1]); T = int(sys.argv[2])
path = policy_path(None)
llm = LLM(path, max_num_seqs=B, spec=SpecConfig(method="auto", num_speculative_tokens=8, drafters=("suffix", "ngram", "eagle3")))
st = llm.engine.strategy
log = []
orig = st.update
def upd(result):
    if result.phase != "prefill":
        arm = st.arm
        Bn = result.active
        pred_t = st.cost.target_s(result.tokens_in, Bn)
        asked = {n: [k for d, k in zip(result.drafters_asked or [], result.asked) if d == n] for n in st.names}
        pred_d = sum(st.cost.draft_s(n, sum(a), max(a, default=0)) for n, a in asked.items())
        log.append(dict(B=Bn, arm=arm.label, exp=st._expect, real=result.emitted_tokens / result.total_s,
                        t_pred=pred_t, t_real=result.verify_s + result.other_s, d_pred=pred_d, d_real=result.draft_s,
                        verify=result.verify_s, other=result.other_s, tin=result.tokens_in, em=result.emitted_tokens))
    orig(result)
st.update = upd
warm = task_prompts(llm, B, seed=15)
prompts = task_prompts(llm, B, seed=7)
llm.generate(warm, [SamplingParams(temperature=1.0, max_tokens=128, seed=99 + i) for i in range(B)])
log.clear()
t = time.perf_counter()
outs = llm.generate(prompts, [SamplingParams(temperature=1.0, max_tokens=T, seed=100 + i) for i in range(B)])
dt = time.perf_counter() - t
n = sum(len(o.outputs[0].token_ids) for o in outs)
print("auto", n, n / dt)
off = LLM(path, max_num_seqs=B)
off.generate(warm, [SamplingParams(temperature=1.0, max_tokens=128, seed=99 + i) for i in range(B)])
t = time.perf_counter()
outs = off.generate(prompts, [SamplingParams(temperature=1.0, max_tokens=T, seed=100 + i) for i in range(B)])
dt = time.perf_counter() - t
n = sum(len(o.outputs[0].token_ids) for o in outs)
print("off", n, n / dt)

from collections import defaultdict
agg = defaultdict(lambda: [0, 0, 0, 0, 0, 0, 0])
for r in log:
    key = (r["arm"], r["B"].bit_length())
    a = agg[key]
    a[0] += 1; a[1] += r["exp"]; a[2] += r["real"]; a[3] += r["t_pred"]; a[4] += r["t_real"]; a[5] += r["d_pred"]; a[6] += r["d_real"]
for key, a in sorted(agg.items(), key=lambda kv: -kv[1][0])[:25]:
    n = a[0]
    print(key, n, "rate exp %.0f real %.0f | t pred %.4f real %.4f | d pred %.4f real %.4f" % tuple(v / n for v in a[1:]))
