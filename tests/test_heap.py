"""specrl/heap.py: freed tensors' heap pages go back to the OS where a process has just freed a lot."""
import os
import subprocess
import sys
import textwrap

import pytest

from specrl.heap import _libc

glibc = pytest.mark.skipif(_libc() is None, reason="no glibc malloc_trim here")

# frees a 2 MiB block (glibc then raises its mmap threshold past 900 KiB), allocates 60 x 900 KiB from the
# heap and one more on top of them, frees the 60 and trims: prints the MiB still resident
PROBE = textwrap.dedent("""
    import torch
    from specrl.heap import trim
    def rss(): return int(open('/proc/self/statm').read().split()[1]) * 4096 / 2 ** 20
    a = torch.ones(2 ** 19); del a
    base = rss()
    ts = [torch.ones(900 * 256) for _ in range(60)]
    pin = torch.ones(900 * 256)
    del ts
    trim()
    print(rss() - base)
""")


def retained_mib(**env) -> float:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "SPECRL_MALLOC"))}, **env}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


@glibc
def test_trim_gives_freed_heap_pages_back():
    assert retained_mib(SPECRL_MALLOC_TRIM="0") > 40  # without it glibc keeps the ~53 MiB resident
    assert retained_mib() < 10


def test_the_trainer_trims_before_each_micro_batch_of_a_large_model_only_and_the_engine_after_generate(monkeypatch):
    """Even one trim per update made a small policy's update ~10% slower (freed pages faulted back in) for
    ~0.2 GB of peak (docs/memory.md): only a large model's micro-batches are trimmed."""
    import copy

    import torch
    from specrl import LLM, SamplingParams
    from specrl.trainer import trainer as trainer_mod
    from specrl.engine import llm as llm_mod
    from tests.helpers import tiny_model
    from tests.trainer.test_trainer import _rollouts, _trainer
    calls = []
    model = tiny_model(seed=2)
    batch = _rollouts(model)
    t = _trainer(copy.deepcopy(model), micro=2)
    micro_batches = t.micro_batches(torch.arange(batch.num_rows), batch.lengths)
    seen = []
    real_rows = batch.rows.__func__

    def record(self, idx, device="cpu"):
        seen.append(("micro-batch", len(idx) * int(self.lengths[idx].max())))
        return real_rows(self, idx, device)
    monkeypatch.setattr(type(batch), "rows", record)
    monkeypatch.setattr(trainer_mod, "trim", lambda min_free=0: seen.append(("trim", min_free)))
    monkeypatch.setattr(llm_mod, "trim", lambda min_free=0: calls.append(("engine", min_free)))
    t.step(batch)
    assert len(micro_batches) > 1 and not [s for s in seen if s[0] == "trim"]  # a small model: never
    seen.clear()
    monkeypatch.setattr(trainer_mod, "LARGE_STATE", 0)  # every model is large now: a CPU trainer trims
    t = _trainer(copy.deepcopy(model), micro=2)
    t.step(batch)
    trims = [i for i, (what, _) in enumerate(seen) if what == "trim"]
    assert len(trims) == len(micro_batches) and all(seen[i + 1][0] == "micro-batch" for i in trims)
    LLM(model, max_num_seqs=2).generate([[3, 4]], SamplingParams(max_tokens=3))
    assert calls == [("engine", trainer_mod.TRIM_MIN_FREE)]


@glibc
def test_a_heap_with_little_free_is_not_trimmed():
    from specrl.heap import free_heap_bytes, trim
    free = free_heap_bytes()
    assert free is not None and free >= 0  # glibc >= 2.33 has mallinfo2
    assert not trim(min_free=2 ** 50)
    assert trim()
