"""A vLLM-backed command stopped from outside by SIGTERM, as `timeout` stops it (the signal goes to its whole
process group: the command, its child, vLLM's engine core and worker), leaves no vLLM process behind. The
command turns SIGTERM into its normal exit (cli/main.py), so the backend's close() stops the engine and
reaps what it started. One engine start (the embedded policy, eager): about a minute here."""
from __future__ import annotations

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


def _wait_for_engine(proc: subprocess.Popen, log: Path) -> list[psutil.Process]:
    """The engine's processes once it serves (vLLM logged its start and a worker exists)."""
    root, deadline = psutil.Process(proc.pid), time.monotonic() + START_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the bench exited early ({proc.returncode}): {log.read_text()[-2000:]}"
        found = _vllm_processes(root)
        if "init engine" in log.read_text() and any("Worker" in " ".join(p.cmdline()) for p in found):
            return found
        time.sleep(0.5)
    raise AssertionError(f"no vLLM engine after {START_S} s: {log.read_text()[-2000:]}")


def test_sigterm_to_the_process_group_of_a_vllm_bench_leaves_no_vllm_process(tmp_path):
    log = tmp_path / "bench.log"
    cmd = [sys.executable, "-m", "specrl", "bench", "peer", "--engines", "vllm", "--vllm-modes", "eager",
           "--methods", "off", "--workloads", "rl", "--repeats", "1", "--rl-max-tokens", "1000"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=REPO,
                                start_new_session=True)  # its own group, as under `timeout`
    engine: list[psutil.Process] = []
    try:
        engine = _wait_for_engine(proc, log)
        time.sleep(2.0)  # into the timed generate(): the engine is busy when the signal comes
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=STOP_S)
        deadline = time.monotonic() + STOP_S
        while any(alive(p) for p in engine) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [(p.pid, p.name()) for p in engine if alive(p)]
        assert not left, f"vLLM processes still running after SIGTERM: {left}"
        assert proc.returncode == 128 + signal.SIGTERM  # the bench's own exit on SIGTERM (cli/main.py)
    finally:  # a failed run must not leave an engine spinning on the test machine
        if proc.poll() is None:
            proc.kill()
        for p in engine:
            if alive(p):
                p.kill()
