"""specrl/heap.py: freed tensors' heap pages go back to the OS where a process has just freed a lot."""
import os
import subprocess
import sys
import textwrap

import pytest

from specrl.heap import _malloc_trim

glibc = pytest.mark.skipif(_malloc_trim() is None, reason="no glibc malloc_trim here")

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


def test_trainer_and_engine_trim_after_freeing(monkeypatch):
    import copy

    import torch
    from specrl import LLM, SamplingParams
    from specrl.train import trainer as trainer_mod
    from specrl.engine import llm as llm_mod
    from tests.helpers import tiny_model
    from tests.train.test_trainer import _rollouts, _trainer
    calls = []
    monkeypatch.setattr(trainer_mod, "trim", lambda: calls.append("trainer"))
    monkeypatch.setattr(llm_mod, "trim", lambda: calls.append("engine"))
    model = tiny_model(seed=2)
    batch = _rollouts(model)
    t = _trainer(copy.deepcopy(model), micro=2)
    micro_batches = t.micro_batches(torch.arange(batch.num_rows), batch.lengths)
    calls.clear()
    t.step(batch)
    assert len(micro_batches) > 1
    assert calls == ["trainer"] * (len(micro_batches) + 1)  # after each backward, and after the optimizer step
    calls.clear()
    LLM(model, max_num_seqs=2).generate([[3, 4]], SamplingParams(max_tokens=3))
    assert calls == ["engine"]
