"""The processes a vLLM engine started, and their reaping.

vLLM runs its model in a worker process that its engine core process starts. When the engine core dies,
nothing stops that worker: it spins at full CPU on its message queue, and vLLM's shutdown, which only knows
the engine core, leaves it running. So the backend records the engine core and every process under it, and
terminates what is left of them when the engine dies or the backend closes; where this process dies without
closing (SIGKILL, the OOM killer), a `Guard` process (this file run as a script) stops them.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import psutil

GRACE_S = 5.0  # seconds a process gets to exit on SIGTERM before SIGKILL


def engine_processes(client) -> list[psutil.Process]:
    """The engine core processes of vLLM's multiprocess client and all their descendants (the workers);
    empty for a client that runs the engine in this process."""
    from vllm.v1.engine.core_client import MPClient
    if not isinstance(client, MPClient) or client.resources.engine_manager is None:
        return []
    procs: list[psutil.Process] = []
    for core in client.resources.engine_manager.processes:
        try:
            top = psutil.Process(core.pid)
            procs += [top, *top.children(recursive=True)]
        except psutil.NoSuchProcess:  # died already: whatever it started is unknown to us
            continue
    return procs


def alive(proc: psutil.Process) -> bool:
    """Running and the same process (psutil checks the start time, so a reused pid is not ours); a zombie
    is dead: it waits only for its parent to read its exit status."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def reap(procs: list[psutil.Process], grace_s: float = GRACE_S) -> list[int]:
    """SIGTERMs the living ones of `procs`, SIGKILLs those still alive after `grace_s` -> the pids that had
    to be stopped."""
    living = [p for p in procs if alive(p)]
    for signal_them in (psutil.Process.terminate, psutil.Process.kill):
        for p in living:
            if alive(p):
                with contextlib.suppress(psutil.NoSuchProcess):
                    signal_them(p)
        deadline = time.monotonic() + grace_s
        while any(alive(p) for p in living) and time.monotonic() < deadline:
            time.sleep(0.05)  # not psutil.wait_procs: it waits for a zombie whose parent never reaps it
    return [p.pid for p in living]


@contextlib.contextmanager
def signals_deferred():
    """SIGINT and SIGTERM that arrive inside the block take effect when it ends: a stop of the engine cut
    short by a second signal (Ctrl-C, then the SIGTERM a parent passes on) would leave its processes running.
    Only the main thread can set handlers; elsewhere, and where a handler was set outside Python, the block
    runs as it is."""
    stops = (signal.SIGINT, signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or None in map(signal.getsignal, stops):
        yield
        return
    arrived: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: arrived.append(signum)) for s in stops}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for s in arrived:
            signal.raise_signal(s)  # now under the handler the caller had


class Guard:
    """A process that stops `procs` (reap) once this process is gone, however it ended. It reads a pipe until
    every write end is closed, which the kernel does when this process dies; it runs in its own session, so
    a signal to our process group (`timeout`'s) does not stop it first. It runs this file alone with
    `python -I` (psutil, not specrl: no torch import)."""

    def __init__(self, procs: list[psutil.Process]):
        read_end, self._write_end = os.pipe()
        ids = [f"{p.pid}:{p.create_time()!r}" for p in procs]
        self._proc = subprocess.Popen([sys.executable, "-I", __file__, str(read_end), *ids], pass_fds=(read_end,),
                                      start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        os.close(read_end)

    def release(self) -> None:
        """At a normal close, after our own reap: the guard finds nothing left to stop and exits."""
        os.close(self._write_end)
        try:
            self._proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()


def _guard_main(argv: list[str]) -> None:
    fd, procs = int(argv[0]), []
    for entry in argv[1:]:
        pid, created = entry.split(":")
        with contextlib.suppress(psutil.NoSuchProcess):
            proc = psutil.Process(int(pid))
            if proc.create_time() == float(created):  # the same process, not a reused pid
                procs.append(proc)
    while os.read(fd, 4096):  # b"" at end of file: the last write end closed
        pass
    reap(procs)


if __name__ == "__main__":
    _guard_main(sys.argv[1:])
