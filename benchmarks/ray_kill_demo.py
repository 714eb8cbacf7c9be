"""`specrl train` (tiny setup, pipeline.backend=ray, 2 rollout actors, n-gram drafts) run twice: as is, and
with rollout actor 1 killed (ray.kill) during step 3. Prints the restarts per step and whether every
metric matches: the dead actor's groups were drawn again, none lost or counted twice.

    python benchmarks/ray_kill_demo.py   (writes under /tmp/killdemo)
"""
import json
import shutil
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ray
from tests.pipeline.fixtures import make_setup, overrides
from specrl.cli.main import main
from specrl.pipeline.run_dir import read_jsonl
import specrl.pipeline.seam as seam
tmp = Path("/tmp/killdemo"); shutil.rmtree(tmp, ignore_errors=True); tmp.mkdir()
setup = make_setup(tmp)
args = {"pipeline.backend": "ray", "num_threads": 1, "rollout.spec.method": "ngram", "rollout.max_tokens": 60,
        "rollout.prompts_per_step": 6, "schedule.max_steps": 4, "schedule.eval_every": 0}
assert main(["train", *overrides(*setup, tmp / "clean", **args)]) == 0
orig = seam.backend_factory("ray"); made = []
seam.BACKENDS["ray"] = lambda *a, **k: made.append(orig(*a, **k)) or made[-1]
killed = {}
def killer():
    while len(read_jsonl(tmp / "killed" / "metrics.jsonl")) < 2:
        time.sleep(0.01)
    victim = made[0].actors[1]
    while not ray.get(victim.busy.remote()):
        time.sleep(0.002)
    ray.kill(victim); killed["at_rows"] = len(read_jsonl(tmp / "killed" / "metrics.jsonl"))
threading.Thread(target=killer, daemon=True).start()
assert main(["train", *overrides(*setup, tmp / "killed", **args)]) == 0
a, b = read_jsonl(tmp / "clean/metrics.jsonl"), read_jsonl(tmp / "killed/metrics.jsonl")
keys = ("reward_mean", "accuracy", "generated_tokens", "loss", "grad_norm", "entropy")
print(json.dumps({"killed_after_rows": killed.get("at_rows"),
                  "actor_restarts_per_step": [r["actor_restarts"] for r in b],
                  "generated_tokens_clean": [r["generated_tokens"] for r in a],
                  "generated_tokens_killed": [r["generated_tokens"] for r in b],
                  "same_metrics": all(abs(x[k] - y[k]) <= 1e-5 * max(1, abs(y[k])) for x, y in zip(a, b) for k in keys),
                  "checkpoints": sorted(p.name for p in (tmp / "killed/checkpoints").iterdir())}))
