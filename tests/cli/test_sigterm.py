"""SIGTERM from outside (e.g. `timeout`) ends a command by unwinding, so its cleanup runs (an engine it started
is closed), and `specrl bench peer` passes it on to its engine child rather than SIGKILLing it. No engine
here: tests/pipeline/test_vllm_sigterm.py stops a real vLLM bench."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import types

from specrl.cli import bench_peer
from specrl.cli.main import COMMANDS, main


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
