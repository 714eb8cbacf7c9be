"""Engine build time on SmolLM2: SD off, auto with a cold warm-up cache, auto with it warm (same process)."""
import json, os, sys, tempfile, time
if __name__ == "__main__":
    os.environ["SPECRL_CACHE_DIR"] = tempfile.mkdtemp(prefix="specrl-build-")
    import torch
    from specrl import LLM, SpecConfig
    model, dtype = sys.argv[1], sys.argv[2]
    head = sys.argv[3] if len(sys.argv) > 3 else None
    out = {"load": os.getloadavg()[0], "threads": torch.get_num_threads(), "dtype": dtype}
    for name in ("off", "auto_cold", "auto_warm", "off_again"):
        spec = None if name.startswith("off") else SpecConfig(method="auto", num_speculative_tokens=4, draft_model=head)
        t = time.perf_counter()
        llm = LLM(model, dtype=dtype, max_num_seqs=64, spec=spec)
        out[name + "_s"] = round(time.perf_counter() - t, 2)
        del llm
    print(json.dumps(out))
