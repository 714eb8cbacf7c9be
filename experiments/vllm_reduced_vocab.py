"""vLLM serves a reduced-vocabulary EAGLE-3 export as written: `specrl export-drafter --draft-vocab-size 32` of the
shipped head (d2t and t2d written), greedy identity with specrl's engine without SD, vLLM's acceptance counters.

    PYTHONPATH=. python experiments/vllm_reduced_vocab.py [WORK_DIR]
"""
import json, sys
from pathlib import Path
def main():
    from specrl.cli.main import main as cli
    from specrl.config import load_config
    from specrl.engine import LLM, SamplingParams
    from specrl.engine.methods import get_method
    from specrl.pipeline.vllm.build import vllm_backend
    from specrl.tasks import default_policy_path, make_problems
    from specrl.train.config import TrainConfig
    from specrl.train.data import PromptEncoder
    from safetensors.torch import load_file
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/specrl_reduced"); out.mkdir(exist_ok=True)
    enc = PromptEncoder(default_policy_path())
    prompts = [enc.encode(p.prompt) for p in make_problems(4, seed=3, split="test")]
    local = LLM(str(default_policy_path()), dtype="float32")
    g = SamplingParams(temperature=0.0, max_tokens=96)
    plain = local.generate(prompts, g)
    train = [enc.encode(p.prompt) for p in make_problems(16, seed=5, split="train")]
    data = local.generate(train, SamplingParams(temperature=1.0, max_tokens=200, seed=1))
    (out / "samples.jsonl").write_text("\n".join(json.dumps({"token_ids": c.token_ids}) for r in data for c in r.outputs))
    assert cli(["export-drafter", str(get_method("eagle3").shipped_dir), "--policy", str(default_policy_path()),
                "--out", str(out / "head"), "--draft-vocab-size", "32", "--data", str(out / "samples.jsonl")]) == 0
    st = load_file(str(out / "head" / "model.safetensors"))
    print("EXPORT", {k: tuple(v.shape) for k, v in st.items() if k in ("d2t", "t2d", "lm_head.weight")})
    cfg = load_config(TrainConfig, None, ["rollout.spec.method=eagle3", f"rollout.spec.draft_model={out / 'head'}",
                                          "rollout.spec.num_speculative_tokens=4", "rollout.max_num_seqs=8"])
    be = vllm_backend(default_policy_path(), cfg)
    got = be.generate(prompts, [g] * len(prompts))
    print("REDUCED_GREEDY_IDENTICAL", [r.outputs[0].token_ids for r in got] == [r.outputs[0].token_ids for r in plain])
    print("REDUCED_STATS", json.dumps(be.stats()))
    be.close()
if __name__ == "__main__":
    main()
