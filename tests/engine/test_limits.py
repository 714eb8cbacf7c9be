"""The KV budget fits the process's limits: a cgroup's memory limit and an address-space limit (ulimit -v),
under which the lazy cache's mapping, reserved whole, would fail in mmap with ENOMEM."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from specrl import LLM
from specrl.engine import memory
from tests.helpers import save_tiny, tiny_model

linux = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")


def test_cgroup_limits_v1_and_v2(tmp_path):
    (tmp_path / "memory" / "job").mkdir(parents=True)
    (tmp_path / "memory" / "job" / "memory.limit_in_bytes").write_text("3000\n")
    (tmp_path / "memory" / "job" / "memory.usage_in_bytes").write_text("1000\n")
    (tmp_path / "v1").write_text("9:cpu:/\n4:memory:/job\n")
    assert memory.cgroup_free(tmp_path, tmp_path / "v1") == 2000
    (tmp_path / "svc").mkdir()
    (tmp_path / "svc" / "memory.max").write_text("max\n")  # v2 without a limit
    (tmp_path / "svc" / "memory.current").write_text("500\n")
    (tmp_path / "v2").write_text("0::/svc\n")
    assert memory.cgroup_free(tmp_path, tmp_path / "v2") is None
    (tmp_path / "svc" / "memory.max").write_text("800\n")
    assert memory.cgroup_free(tmp_path, tmp_path / "v2") == 300


def test_the_budget_fits_the_address_space_left(monkeypatch):
    monkeypatch.setattr(memory, "address_space_free", lambda: 10 ** 6)
    budget, fix = memory.memory_budget("cpu", None, 0.5)
    assert budget == 5 * 10 ** 5 and "ulimit -v" in fix
    assert memory.memory_budget("cpu", "2MiB", 0.5)[0] == 2 * 2 ** 20  # an explicit budget is the user's


def test_an_address_space_too_small_for_one_sequence_names_the_knob(monkeypatch):
    monkeypatch.setattr(memory, "address_space_free", lambda: 4000)
    with pytest.raises(ValueError, match=r"cannot hold one sequence of max_model_len=40.*raise the address-space "
                                         r"limit \(ulimit -v: 4000 bytes left.*or lower max_model_len"):
        LLM(tiny_model(), max_model_len=40)


def _under_limit(code: str, extra_mib: int) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter whose address space may grow `extra_mib` past its size once torch and
    specrl are imported (RLIMIT_AS, as `ulimit -v` sets it)."""
    prelude = textwrap.dedent(f"""
        import resource, torch, specrl, specrl.engine.llm
        size = int([l for l in open('/proc/self/status') if l.startswith('VmSize:')][0].split()[1]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size + {extra_mib} * 2 ** 20, resource.RLIM_INFINITY))
    """)
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


@linux
def test_llm_with_defaults_starts_under_an_address_space_limit(tmp_path):
    # a context long enough that the default plan (half the free memory) would map > 2 GiB: 64 x 262k x 256 B
    model = save_tiny(tmp_path / "m", vocab=32, max_pos=262144)
    out = _under_limit(f"""
        from specrl import LLM, SamplingParams
        llm = LLM({str(model)!r}, max_num_seqs=64)
        assert llm.kv_plan.budget <= 1024 * 2 ** 20, llm.kv_plan.describe()
        print(len(llm.generate([[3, 4]], SamplingParams(max_tokens=5))[0].outputs[0].token_ids))
    """, extra_mib=2048)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "5"


@linux
def test_a_mapping_past_the_limit_names_the_knobs():
    out = _under_limit("""
        import torch
        from specrl.engine.memory import kv_zeros
        kv_zeros((2 ** 30,), "cpu", torch.float32)  # 4 GiB
    """, extra_mib=512)
    assert out.returncode != 0 and "AddressSpaceError: cannot reserve 4294967296 bytes" in out.stderr
    assert "left under the address-space limit (ulimit -v)" in out.stderr and "lower kv_cache_memory" in out.stderr
