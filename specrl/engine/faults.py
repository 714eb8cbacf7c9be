"""The one seam for breaking the engine on purpose: `replaced_verify(fn)` makes every speculative step verify its
drafts with `fn` instead of `sampler.verify`, the one rejection sampler. The sampler audit's power bench
(`specrl bench audit power`) and the exactness tests use it to show that a wrong sampler is caught; nothing in
the product does. A replacement takes verify's arguments and returns its `Verdict`, and may build on
`sample_from` (both public in specrl.engine):

    p [B, K+1, V], draft_tokens [B, K], q [B, K, V], u_accept [B, K], u_sample [B, K+1] -> Verdict

`sampler.sample` calls `verify` through its module's global, so the swap reaches every engine in the process,
and is not thread-safe: replace verify only while no other thread generates.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

from . import sampler

Verify = Callable[..., sampler.Verdict]


@contextlib.contextmanager
def replaced_verify(fn: Verify) -> Iterator[Verify]:
    """Within the block every engine step verifies drafts with `fn`; the verify that was in place comes back on
    leaving it, by an error too. Yields that verify, so that a fault can call the real one."""
    if not callable(fn):
        raise TypeError(f"replaced_verify({fn!r}): expected a function with verify's signature "
                        "(p, draft_tokens, q, u_accept, u_sample) -> Verdict")
    before = sampler.verify
    sampler.verify = fn
    try:
        yield before
    finally:
        sampler.verify = before
