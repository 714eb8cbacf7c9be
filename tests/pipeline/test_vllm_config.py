"""`pipeline.backend=vllm` without an engine: the missing-vLLM error, the SD method table, the refit check
and `auto`'s batch-size schedule. Runs with or without vLLM installed."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from specrl.cli.main import main as cli_main
from specrl.engine.methods import METHODS, SpecConfig, get_method
from specrl.pipeline.backends import get_backend
from specrl.registry import load
from specrl.pipeline.vllm.refit import RefitError, checkpoint_layout, fitted
from specrl.pipeline.vllm.spec import Context, UnsupportedMethod, batch_schedule, speculative_config
from tests.helpers import save_tiny, tiny_model
from tests.pipeline.fixtures import make_setup, overrides


def test_without_vllm_the_backend_names_the_extra_before_the_run_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    setup = make_setup(tmp_path)
    assert cli_main(["train", *overrides(*setup, tmp_path / "run", **{"pipeline.backend": "vllm"})]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'specrl[vllm]'" in err[0] and "pipeline.backend=local" in err[0]
    assert not (tmp_path / "run").exists()


def test_the_core_imports_the_backend_modules_without_vllm(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    load(get_backend("vllm").rollout)  # build.py and everything it imports at module level


def test_every_specrl_method_says_what_vllm_runs():
    for name in METHODS:
        assert callable(get_method(name).vllm_config) and isinstance(get_method(name).vllm_available(), bool)


def _ctx(tmp_path) -> Context:
    return Context(save_tiny(tmp_path / "policy"), tmp_path / "work", 8)


@pytest.mark.parametrize("method, match", [
    ("mtp", r"method='mtp' cannot run on pipeline.backend=vllm: vLLM runs MTP only for .*Runs here: \['draft_model', "
            r"'eagle3', 'ngram'"),
])
def test_a_method_vllm_lacks_lists_what_runs(method, match, tmp_path):
    with pytest.raises(UnsupportedMethod, match=match):
        speculative_config(SpecConfig(method=method), _ctx(tmp_path))


def test_suffix_without_arctic_inference_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(type(get_method("suffix")), "vllm_available", lambda self: False)
    with pytest.raises(UnsupportedMethod, match=r"arctic-inference.*Runs here: .*'ngram'"):
        speculative_config(SpecConfig(method="suffix"), _ctx(tmp_path))


def test_ngram_and_sd_off_map_onto_vllm_keys(tmp_path):
    ctx = _ctx(tmp_path)
    assert speculative_config(SpecConfig(method=None), ctx) is None
    got = speculative_config(SpecConfig(method="ngram", num_speculative_tokens=3, options={"ngram": {"min": 2, "max": 5}}), ctx)
    assert got == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 5}


def test_auto_runs_the_first_drafter_vllm_has_with_a_batch_schedule(tmp_path, monkeypatch):
    monkeypatch.setattr(type(get_method("suffix")), "vllm_available", lambda self: False)
    got = speculative_config(SpecConfig(method="auto", drafters=("suffix", "ngram")), _ctx(tmp_path))
    assert got["method"] == "ngram"  # suffix skipped: no arctic-inference
    schedule = got["num_speculative_tokens_per_batch_size"]
    assert schedule[0][0] == 1 and schedule[-1][1] == 8  # covers batch 1..max_num_seqs, contiguous
    assert all(a[1] + 1 == b[0] for a, b in zip(schedule, schedule[1:]))


def test_the_schedule_drafts_less_as_the_batch_grows():
    # counted work: a forward costs 8 + tokens_in units (weights read + tokens). At batch 1 a k=4 verify costs
    # 8 + 5 = 13 units for 1 + .7 + .49 + .34 + .24 = 2.77 expected tokens (0.21/unit) against 1/9 = 0.11 for
    # plain decoding; at batch 64 the weight read is amortised: 64 x 2.77 / (8 + 320) = 0.54 < 64 / 72 = 0.89
    schedule = batch_schedule(1_000_000, 0, 4, 64)
    k = {b: kk for first, last, kk in schedule for b in range(first, last + 1)}
    assert k[1] == 4 and k[64] == 0
    assert all(k[b] >= k[b + 1] for b in range(1, 64))


def test_a_refit_that_does_not_fit_is_refused_naming_the_tensors(tmp_path):
    model = tiny_model(layers=2)
    layout = checkpoint_layout(save_tiny(tmp_path / "m", layers=2))
    good = fitted(model.state_dict().items(), layout, "policy")
    assert set(good) == set(layout) and "lm_head.weight" not in layout  # tied: the checkpoint leaves it out
    wider = tiny_model(hidden=48, layers=2).state_dict()
    with pytest.raises(RefitError, match=r"shapes \[.*\(engine \(32"):
        fitted(wider.items(), layout, "policy")
    partial = dict(model.state_dict())
    partial.pop("model.norm.weight")
    partial["model.extra.weight"] = torch.zeros(2)
    with pytest.raises(RefitError, match=r"unknown \['model.extra.weight'\], missing \['model.norm.weight'\]"):
        fitted(partial.items(), layout, "policy")


def test_a_checkpoint_without_safetensors_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors in"):
        checkpoint_layout(Path(tmp_path / "empty"))


def test_reap_stops_a_process_that_ignores_sigterm_and_counts_a_zombie_dead():
    import subprocess
    import time

    psutil = pytest.importorskip("psutil")
    from specrl.pipeline.vllm.procs import alive, reap
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time\n"
                                 "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint(1, flush=True)\n"
                                 "while True: time.sleep(1)"], stdout=subprocess.PIPE)
    stubborn.stdout.readline()  # its SIGTERM handler is set
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    while psutil.Process(done.pid).status() != psutil.STATUS_ZOMBIE:  # exited, not yet waited for
        time.sleep(0.05)
    procs = [psutil.Process(stubborn.pid), psutil.Process(done.pid)]
    assert [alive(p) for p in procs] == [True, False]
    assert reap(procs, grace_s=0.5) == [stubborn.pid]  # SIGTERM ignored, then SIGKILL
    assert stubborn.wait(5) == -9 and not alive(procs[0])
    done.wait()


def test_a_sigterm_during_the_engine_stop_waits_for_the_stop_to_end():
    import os
    import signal

    pytest.importorskip("psutil")
    from specrl.pipeline.vllm.procs import signals_deferred
    seen, on_int = [], signal.getsignal(signal.SIGINT)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)  # e.g. the one a parent passes on while we close
            sum(range(1000))  # the handler would run here, between bytecodes
            assert seen == []
        assert seen == [signal.SIGTERM]  # delivered, to the caller's handler, once the stop is done
        assert signal.getsignal(signal.SIGINT) is on_int
    finally:
        signal.signal(signal.SIGTERM, previous)


HOLDER = """
import importlib.util, subprocess, sys, time
spec = importlib.util.spec_from_file_location("procs", sys.argv[1])
procs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(procs)
import psutil
engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
guard = procs.Guard([psutil.Process(engine.pid)])
print(engine.pid, flush=True)
time.sleep(120)
"""


def test_the_guard_stops_the_engine_processes_of_a_holder_killed_by_sigkill():
    import subprocess
    import time

    psutil = pytest.importorskip("psutil")
    from specrl.pipeline.vllm import procs
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, procs.__file__], stdout=subprocess.PIPE, text=True)
    engine = psutil.Process(int(holder.stdout.readline()))  # stands for vLLM's engine core
    assert procs.alive(engine)
    holder.kill()  # no cleanup of its own runs
    holder.wait()
    deadline = time.monotonic() + 10
    while procs.alive(engine) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not procs.alive(engine)
