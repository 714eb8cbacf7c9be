"""SIGTERM from outside (e.g. `timeout`) ends a command by unwinding, so its cleanup runs (an engine it started
is closed), and `specrl bench peer` passes it on to its engine child rather than SIGKILLing it. No engine
here: tests/pipeline/test_vllm_sigterm.py stops a real vLLM bench."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import types

import pytest

from specrl.bench import peer as bench_peer
from specrl.cli.main import COMMANDS, main
from specrl.errors import TERMINATING, Terminated, raise_if_terminating
from specrl.pipeline.vllm.backend import VllmBackend


def test_sigterm_unwinds_the_command_and_exits_143(monkeypatch, capsys):
    cleaned = []

    def command(argv):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between bytecodes: we never get past this loop
                sum(range(100))
            raise AssertionError("SIGTERM did not stop the command")
        finally:
            cleaned.append(True)  # where a backend's close() runs

    module = types.ModuleType("specrl_test_sigterm_command")
    module.main = command
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(COMMANDS, "sigterm-test", (module.__name__, "main", "test"))
    before = signal.getsignal(signal.SIGTERM)
    assert main(["sigterm-test"]) == 128 + signal.SIGTERM
    assert cleaned == [True] and "terminated" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before  # the caller's handler is back


def test_a_terminated_lost_inside_a_library_is_raised_again_by_the_next_loop_of_ours(monkeypatch, capsys):
    steps, cleaned = [], []

    def library_wait():  # pyzmq retries a poll that SIGTERM interrupted, dropping the handler's exception
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                sum(range(100))
        except KeyboardInterrupt:
            pass

    def command(argv):
        try:
            for step in range(3):
                raise_if_terminating()
                steps.append(step)
                library_wait()
            raise AssertionError("the lost SIGTERM was not raised again")
        finally:
            cleaned.append(True)

    module = types.ModuleType("specrl_test_lost_sigterm_command")
    module.main = command
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(COMMANDS, "lost-sigterm-test", (module.__name__, "main", "test"))
    assert main(["lost-sigterm-test"]) == 128 + signal.SIGTERM
    assert steps == [0] and cleaned == [True]
    assert not TERMINATING.is_set()  # cleared when the command returns: the next one starts afresh


def test_the_vllm_backend_steps_no_engine_once_terminating():
    engine = types.SimpleNamespace(has_unfinished_requests=lambda: True, add_request=lambda *a: None,
                                   step=lambda: pytest.fail("stepped after SIGTERM"))
    backend = types.SimpleNamespace(_cancelled=False, _own={"target_forwards": 0})
    TERMINATING.set()
    try:
        with pytest.raises(Terminated):
            VllmBackend._run(backend, engine, ["0"], [[1, 2]], [None])
    finally:
        TERMINATING.clear()


CHILD = """
import pathlib, signal, sys, time
def on_term(signum, frame):
    pathlib.Path(sys.argv[1]).write_text("closed")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term if sys.argv[2] == "obeys" else signal.SIG_IGN)
print("ready", flush=True)
time.sleep(60)
"""


def _child(tmp_path, mode: str) -> tuple[subprocess.Popen, object]:
    marker = tmp_path / "marker"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(marker), mode], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc, marker


def test_the_engine_child_gets_sigterm_and_time_to_close(tmp_path):
    proc, marker = _child(tmp_path, "obeys")
    bench_peer.stop_child(proc)
    assert proc.returncode == 0 and marker.read_text() == "closed"  # its SIGTERM handler ran: not a SIGKILL


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_peer, "CHILD_GRACE_S", 0.5)
    proc, marker = _child(tmp_path, "ignores")
    bench_peer.stop_child(proc)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL and not marker.exists()
