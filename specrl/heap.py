"""glibc's malloc_trim where a process has just freed a lot: glibc raises its mmap threshold each time a large
block is freed, so later tensors of a few MiB come from the heap, whose freed space stays resident and fragments
from step to step. A trim returns every free heap page, at the cost of a heap walk and of faulting the pages in
again, so it runs only where it pays (`PolicyTrainer.trims_heap`, the end of a generate()), not on a heap with
little free. A small fixed mmap threshold would fault every activation in page by page (docs/memory.md)."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import lru_cache

TRIM_MIN_FREE = 64 * 2 ** 20  # a heap with less free than this is not worth a walk and the faults after it


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


@lru_cache(maxsize=1)
def _libc():
    if os.environ.get("SPECRL_MALLOC_TRIM", "1") == "0":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.malloc_trim  # noqa: B018 - not glibc (macOS, musl): AttributeError
    except (OSError, AttributeError, TypeError):
        return None
    if hasattr(libc, "mallinfo2"):  # glibc >= 2.33
        libc.mallinfo2.restype = _MallInfo2
    return libc


def free_heap_bytes() -> int | None:
    """Bytes the heap holds free (glibc's mallinfo2 fordblks, every arena); None where it cannot say."""
    libc = _libc()
    return int(libc.mallinfo2().fordblks) if libc is not None and hasattr(libc, "mallinfo2") else None


def trim(min_free: int = 0) -> bool:
    """Gives the heap's free pages back to the OS (glibc) when it holds at least `min_free` bytes free;
    False where nothing was done (no malloc_trim, SPECRL_MALLOC_TRIM=0, or too little free)."""
    libc, free = _libc(), free_heap_bytes() if min_free else None
    if libc is None or (free is not None and free < min_free):
        return False
    libc.malloc_trim(0)
    return True
