"""Atomic writes: a reader never sees a half-written file or directory, and a failed write keeps the old one.
And the machine's small JSON caches (the dtype probe's figures, the adaptive engine's warm-up timings)."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str | os.PathLike, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")


CACHE_ENV = "SPECRL_CACHE_DIR"  # where the caches live; else ~/.cache/specrl
_log = logging.getLogger(__name__)


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "specrl")


def read_cache(path: Path, well_formed, what: str, expected: str) -> dict:
    """A JSON cache of {key: entry}; a corrupt one (not JSON, or an entry `well_formed` refuses) is reported and
    read as empty, so that it is measured again and rewritten: a cache never fails a run."""
    if not path.is_file():
        return {}
    try:
        cache = json.loads(path.read_text())
        if not isinstance(cache, dict) or not all(well_formed(v) for v in cache.values()):
            raise ValueError(f"expected {expected}")
        return cache
    except (ValueError, OSError) as e:
        _log.warning("the cached %s %s is corrupt (%s): measuring again and rewriting it", what, path, e)
        return {}


def write_cache(path: Path, cache: dict, what: str) -> bool:
    """Writes the cache whole, atomically; False, with a warning, where it cannot."""
    try:
        atomic_write_text(path, json.dumps(cache, indent=1))
        return True
    except OSError as e:  # a read-only home: what was measured stands, only the next start measures again
        _log.warning("could not cache the %s in %s (%s); set %s to a writable directory", what, path, e, CACHE_ENV)
        return False


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike):
    """Yields a temporary directory next to `path`; on success it replaces `path` in two renames.
    On any error (a full disk included) the temporary directory is removed and `path` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the result is an ordinary directory
    try:
        yield tmp
        old = path.with_name(f".{path.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
