"""Counter-based randomness: the splitmix64 constants, the hash stream of each use of randomness, and
per-sample seeds. Integers only (torch-free); `sampling.hash_uniform` is the batched tensor version.

A random draw is a hash of (seed, position, stream), never the state of a generator, so a sample depends only
on its own seed: not on the batch it ran in, the scheduler, or whether a step speculated.
"""
from __future__ import annotations

# splitmix64 (Steele et al. 2014): the golden-ratio increment and the two multipliers of its finaliser
SPLITMIX_GAMMA = 0x9E3779B97F4A7C15
SPLITMIX_MUL1 = 0xBF58476D1CE4E5B9
SPLITMIX_MUL2 = 0x94D049BB133111EB
MASK64 = (1 << 64) - 1

# hash streams: one per use of randomness at a position, so no two uses ever share a uniform
STREAM_SAMPLE = 0  # the token a step emits (decode, bonus or correction)
STREAM_ACCEPT = 1  # accepting draft i
STREAM_DRAFT = 7  # EAGLE-3's sampled drafts


def mix_seed(seed: int, index: int) -> int:
    """A 63-bit seed for sample `index` of a request with seed `seed` (the n samples are independent)."""
    x = (seed * SPLITMIX_GAMMA + index * SPLITMIX_MUL1 + 1) & MASK64
    x ^= x >> 31
    return (x * SPLITMIX_MUL2) & ((1 << 63) - 1)
