"""auto's target cost fit on SmolLM2 after its warm-up, against forwards timed at cached contexts it never saw.
usage: python context_fit.py MODEL_DIR [DTYPE] [HEAD_DIR]; one JSON row per (rows, tokens, context)."""
import json, os, sys, tempfile
if __name__ == "__main__":
    os.environ["SPECRL_CACHE_DIR"] = tempfile.mkdtemp(prefix="specrl-fit-")  # the warm-up is timed, not replayed
    import torch
    from specrl import LLM, SpecConfig
    model, dtype = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "bfloat16"
    head = sys.argv[3] if len(sys.argv) > 3 else None
    llm = LLM(model, dtype=dtype, max_num_seqs=32, max_model_len=1024,
              spec=SpecConfig(method="auto", num_speculative_tokens=4, draft_model=head))
    runner, cost = llm.engine.runner, llm.engine.strategy.cost
    for B, T in ((32, 1), (32, 5), (8, 1), (8, 5)):
        for C in (0, 128, 256, 512, 768):
            timed = min(runner.time_forward(B, T, C) for _ in range(3))
            keys = C + (T + 1) / 2
            print(json.dumps({"rows": B, "tokens": T, "context": C, "timed_ms": round(1e3 * timed, 1),
                              "fit_ms": round(1e3 * cost.target_s(B * T, B, keys), 1),
                              "fit_without_context_ms": round(1e3 * cost.target_s(B * T, B), 1),
                              "load": round(os.getloadavg()[0], 2), "threads": torch.get_num_threads()}), flush=True)
