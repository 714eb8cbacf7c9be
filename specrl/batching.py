"""Length-bucketed batches, shared by drafter training and pretraining: rows in ascending length, cut so that
each batch pads to at most `batch_tokens` tokens and short and long rows rarely share one."""
from __future__ import annotations


def length_buckets(order: list[int], lengths: list[int], batch_tokens: int) -> list[list[int]]:
    """`order` (indices into `lengths`, ascending by length) cut into consecutive batches of at most
    `batch_tokens` padded tokens, each holding at least one index."""
    batches: list[list[int]] = [[]]
    for i in order:
        # ascending lengths: the current row sets the padded width of its batch
        if batches[-1] and (len(batches[-1]) + 1) * lengths[i] > batch_tokens:
            batches.append([])
        batches[-1].append(i)
    return batches
