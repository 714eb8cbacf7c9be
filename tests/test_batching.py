"""Length-bucketed batches (specrl/batching.py), worked by hand."""
from specrl.batching import length_buckets


def test_batches_pad_to_at_most_batch_tokens_in_the_order_given():
    # lengths 2, 3, 3, 5, 9 ascending, 9 padded tokens a batch: [0, 1, 2] pads to 3 x 3 = 9; adding 3 would pad
    # to 4 x 5 = 20, so it starts a batch; 3 and 4 together pad to 2 x 9 = 18, so 4 starts another
    assert length_buckets([0, 1, 2, 3, 4], [2, 3, 3, 5, 9], 9) == [[0, 1, 2], [3], [4]]
    assert length_buckets([1, 0], [20, 4], 9) == [[1], [0]]  # a row over budget gets a batch of its own
