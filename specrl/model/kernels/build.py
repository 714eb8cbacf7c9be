"""Builds the decode attention kernel from its C++ source at first use, for the CPU it runs on, and caches it.

The build is keyed by the CPU (model and instruction-set flags), the torch version, the compile flags and the
source's hash, under SPECRL_CACHE_DIR (else ~/.cache/specrl)/kernels/<key>/. It compiles into a temporary directory
next to that one and renames it into place only once it loaded, so a crash or a failed build never leaves a
half-built module where the next run would load it. A machine without a C++ compiler (or without ninja, which
torch's extension builder needs) gets one note line and the SDPA path; a failed build gets one note line naming its
log, the SDPA path, and a marker beside the log so that later runs do not compile it again (delete the log to
retry).
"""
from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import tempfile
from pathlib import Path

import torch

from ...io import cache_dir

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("decode_attention.cpp")
NAME = "specrl_decode_attention"
OP = ("specrl_kernels", "decode_attention")


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def compile_flags(flags: set[str]) -> list[str]:
    """-O3 -march=native, and which of ATen's vector widths at::vec compiles to (its headers pick by macro)."""
    out = ["-O3", "-march=native"]
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        out += ["-DCPU_CAPABILITY=AVX512", "-DCPU_CAPABILITY_AVX512"]
    elif {"avx2", "fma"} <= flags:
        out += ["-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"]
    return out


def cache_root() -> Path:
    return cache_dir() / "kernels"


def build_key(source: Path, cflags: list[str]) -> str:
    flags = " ".join(sorted(cpu_flags()))
    headers = [h.read_text() for h in sorted(SOURCE.parent.glob("*.h"))]  # what the source includes
    text = "\n".join([cpu_model(), flags, torch.__version__, " ".join(cflags), source.read_text(), *headers])
    return f"{NAME}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def find_compiler() -> str | None:
    """The C++ compiler torch's extension builder will call (CXX, else c++), or None when there is none."""
    return shutil.which(os.environ.get("CXX", "c++"))


def find_ninja() -> str | None:
    return shutil.which("ninja")


def op_loaded() -> bool:
    return hasattr(torch.ops, OP[0]) and hasattr(getattr(torch.ops, OP[0]), OP[1])


def load_kernel(source: Path | None = None) -> str | None:
    """Loads (building first if needed) the kernel into torch.ops.specrl_kernels; None when it loaded, else the
    one-line reason the SDPA path is taken (already logged once)."""
    if op_loaded():
        return None
    source = source or SOURCE
    cflags = compile_flags(cpu_flags())
    root = cache_root()
    key = build_key(source, cflags)
    final, log_file = root / key, root / f"{key}.log"
    library = final / f"{NAME}.so"
    if library.is_file():
        torch.ops.load_library(str(library))
        return None
    if log_file.is_file():
        return _note(f"the decode attention kernel failed to build before (log: {log_file}; delete it to retry)")
    if find_compiler() is None:
        return _note(f"no C++ compiler ({os.environ.get('CXX', 'c++')}) found to build the decode attention kernel")
    if find_ninja() is None:
        return _note("ninja is not installed (torch's extension builder needs it: pip install ninja) to build "
                     "the decode attention kernel")
    return _build(source, cflags, root, final, log_file)


def _build(source: Path, cflags: list[str], root: Path, final: Path, log_file: Path) -> str | None:
    from torch.utils import cpp_extension
    log.info("building the decode attention kernel for this CPU (once; cached in %s)", final)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=root))
    try:
        cpp_extension.load(name=NAME, sources=[str(source)], extra_cflags=cflags, build_directory=str(tmp),
                           is_python_module=False, verbose=False)
    except Exception as e:  # noqa: BLE001 - any build failure means the SDPA path, with its log kept
        log_file.write_text(f"{type(e).__name__}: {e}\n")
        shutil.rmtree(tmp, ignore_errors=True)
        return _note(f"the decode attention kernel failed to build (log: {log_file})")
    built = next(tmp.glob("*.so"))  # torch names a second build of one name in a process NAME_v1.so
    built.rename(tmp / f".{NAME}.so")
    for junk in tmp.iterdir():  # keep the module alone: objects and ninja files are not needed to load it
        if junk.name != f".{NAME}.so":
            shutil.rmtree(junk) if junk.is_dir() else junk.unlink()
    (tmp / f".{NAME}.so").rename(tmp / f"{NAME}.so")
    try:
        os.replace(tmp, final)
    except OSError:  # another process put its build there first: theirs stands
        shutil.rmtree(tmp, ignore_errors=True)
    return None


def _note(reason: str) -> str:
    log.warning("%s; attention takes the SDPA path", reason)
    return reason
