"""``trainers.tiny.padded_batches``: the supervised batches of the tiny policy, the warm start and ``adapt``.

An adapt run's supervised phase takes about one pass over its examples, so every example must come once a pass
(drawn with replacement, a fifth of help desk run 1's batches never came up, and the longest examples, the
multi-call chats, were never in a batch at all)."""

from __future__ import annotations

import itertools
import random

from trainers.tiny import padded_batches


def _examples(lengths: list[int]) -> list[tuple[list[int], list[int]]]:
    # token ids encode the example's index, so a batch row says which example it is
    return [([i + 1] * n, [i + 1] * n) for i, n in enumerate(lengths)]


def _rows(batch) -> list[int]:
    ids, labels, mask = batch
    assert ids.shape == labels.shape == mask.shape
    return [int(row[0]) - 1 for row in ids]


def test_each_pass_gives_every_example_once_in_batches_of_similar_length():
    rng = random.Random(3)
    lengths = [rng.randint(5, 400) for _ in range(50)]  # 50 = 12 batches of 4 and one of 2
    batches = padded_batches(_examples(lengths), 4, 0, random.Random(0))
    passes = [[_rows(next(batches)) for _ in range(13)] for _ in range(3)]
    for batches_of_pass in passes:
        seen = [i for rows in batches_of_pass for i in rows]
        assert sorted(seen) == list(range(50))  # the two longest too
        for rows in batches_of_pass:  # neighbours in length: at most the widest batch's padding
            widths = sorted(lengths[i] for i in rows)
            assert sum(widths[-1] - w for w in widths) < 0.5 * widths[-1] * len(widths)
    orders = [[tuple(r) for r in p] for p in passes]
    assert orders[0] != orders[1] != orders[2]  # each pass draws its own order
    assert sorted(orders[0]) == sorted(orders[1])  # of the same batches


def test_padding_and_labels_follow_each_row():
    examples = [([7, 7, 7], [-100, 7, 7]), ([8], [8]), ([9, 9], [-100, 9])]
    batches = padded_batches(examples, 2, 0, random.Random(0))
    got = {ids.shape[0]: (ids, labels, mask) for ids, labels, mask in itertools.islice(batches, 2)}
    ids, labels, mask = got[2]  # the two shortest, right-padded to the wider
    assert ids.tolist() == [[8, 0], [9, 9]] and mask.tolist() == [[1, 0], [1, 1]]
    assert labels.tolist() == [[8, -100], [-100, 9]]
    ids, labels, mask = got[1]  # the longest alone: not dropped for want of a full batch
    assert ids.tolist() == [[7, 7, 7]] and labels.tolist() == [[-100, 7, 7]] and mask.tolist() == [[1, 1, 1]]
