"""A process that holds a vLLM engine and is stopped from outside by SIGTERM leaves no vLLM process behind.
Killed by SIGTERM's default action it runs no cleanup, and vLLM's engine core, which does not watch for its
parent's death, stays running with its worker, re-parented to init. Every `specrl` command turns
SIGTERM into its normal exit (cli/main.py), so the backend's close() stops the engine and reaps what it
started. The holder here is `specrl bench peer`'s engine child (`--one`), as `bench peer` runs it; the bench
passing SIGTERM on to that child is tested in tests/cli/test_sigterm.py. One engine start (the embedded
policy, eager): about a minute here."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("vllm", exc_type=ImportError)

from specrl.pipeline.vllm.procs import alive  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
START_S = 600.0  # the engine's start, generous for a loaded 2-core machine
BUSY_CPU_S = 20.0  # seconds of the worker's CPU time: past its start, into the timed generate()
STOP_S = 60.0  # vLLM's shutdown (~5 s) and the reap (<= 10 s), with room to spare


def _vllm_processes(root: psutil.Process) -> list[psutil.Process]:
    """The vLLM engine core and worker processes under `root` (vLLM names them `VLLM::EngineCore` and
    `VLLM::Worker...`)."""
    found = []
    for p in root.children(recursive=True):
        try:
            if "VLLM::" in " ".join(p.cmdline()) or p.name().startswith("VLLM"):
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


def _wait_for_generation(proc: subprocess.Popen, out: Path) -> list[psutil.Process]:
    """The engine's processes once its worker has spent BUSY_CPU_S of CPU time (its start and the warm-up take
    less; then it generates, one core busy): counted in CPU time, so a loaded machine only slows it."""
    root, deadline = psutil.Process(proc.pid), time.monotonic() + START_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the bench exited ({proc.returncode}) before its engine was busy: {out.read_text()[-500:]}"
        found = _vllm_processes(root)
        workers = [p for p in found if "Worker" in p.name() or "Worker" in " ".join(p.cmdline())]
        with contextlib.suppress(psutil.NoSuchProcess):
            if workers and sum(workers[0].cpu_times()[:2]) > BUSY_CPU_S:
                return found
        time.sleep(0.2)
    raise AssertionError(f"no busy vLLM engine after {START_S} s")


def test_sigterm_to_the_process_holding_a_vllm_engine_leaves_no_vllm_process(tmp_path):
    out = tmp_path / "rows.jsonl"
    cmd = [sys.executable, "-m", "specrl", "bench", "peer", "--engines", "vllm", "--vllm-modes", "eager",
           "--methods", "off", "--workloads", "b64", "--repeats", "1", "--max-tokens", "1500",
           "--ignore-eos",  # 96,000 tokens whatever the policy samples: minutes of work left when it is stopped
           "--one", json.dumps({"engine": "vllm", "method": "off", "workloads": ["b64"], "repeat": 0,
                                "vllm_mode": "eager"})]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with out.open("w") as rows:
        proc = subprocess.Popen(cmd, stdout=rows, stderr=subprocess.DEVNULL, env=env, cwd=REPO,
                                start_new_session=True)
    engine: list[psutil.Process] = []
    try:
        engine = _wait_for_generation(proc, out)
        assert proc.poll() is None, f"the bench finished ({proc.returncode}) before it could be stopped mid-generation"
        proc.terminate()  # the holder alone: vLLM's processes hear nothing from us
        proc.wait(timeout=STOP_S)
        deadline = time.monotonic() + STOP_S
        while any(alive(p) for p in engine) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [(p.pid, p.name()) for p in engine if alive(p)]
        assert not left, f"vLLM processes still running after SIGTERM: {left}"
        assert proc.returncode == 128 + signal.SIGTERM  # the command's own exit on SIGTERM (cli/main.py)
    finally:  # a failed run must not leave an engine spinning on the test machine
        if proc.poll() is None:
            proc.kill()
        for p in engine:
            if alive(p):
                p.kill()
