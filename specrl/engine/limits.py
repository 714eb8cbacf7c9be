"""What memory this process may use on a CPU: the machine's available memory, a cgroup's limit, and an
address-space limit (RLIMIT_AS, `ulimit -v`), which the lazy KV cache (memory.kv_zeros) must fit in whole
although little of it becomes resident. Each reader returns None where its limit does not apply.
"""
from __future__ import annotations

import resource
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
NO_LIMIT = 1 << 60  # cgroup v1 writes "no limit" as a huge page-aligned number


def proc_bytes(path: str, key: str) -> int | None:
    """Field `key` (in kB) of a /proc status file such as /proc/meminfo, in bytes; None where it is absent."""
    p = Path(path)
    lines = p.read_text().splitlines() if p.is_file() else []
    return next((int(line.split()[1]) * 1024 for line in lines if line.startswith(key)), None)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return None if text == "max" or not text.isdigit() or int(text) >= NO_LIMIT else int(text)


def cgroup_free(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """Bytes the process's memory cgroup has left (memory.max - memory.current on cgroup v2,
    memory.limit_in_bytes - memory.usage_in_bytes on v1); None without a limit."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if controllers == "":  # v2: one unified hierarchy
            files = root / rel / "memory.max", root / rel / "memory.current"
        elif "memory" in controllers.split(","):
            files = root / "memory" / rel / "memory.limit_in_bytes", root / "memory" / rel / "memory.usage_in_bytes"
        else:
            continue
        limit, used = _read_int(files[0]), _read_int(files[1])
        if limit is not None and used is not None:
            return max(limit - used, 0)
    return None


def address_space_free() -> int | None:
    """Bytes of address space left under RLIMIT_AS (its soft limit minus VmSize); None without a limit."""
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    if limit == resource.RLIM_INFINITY:
        return None
    return max(limit - (proc_bytes("/proc/self/status", "VmSize:") or 0), 0)
