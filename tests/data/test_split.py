"""Which partition each row goes to: a function of the seed and the row number alone."""

from __future__ import annotations

import numpy as np

from snakeddp.data.split import assign


def test_split_depends_on_seed_and_row_only():
    rows = np.arange(10_000)
    assert np.array_equal(assign(rows, 1, 0.1, 4), assign(rows, 1, 0.1, 4))
    assert not np.array_equal(assign(rows, 1, 0.1, 4), assign(rows, 2, 0.1, 4))
    pieces = np.concatenate([assign(rows[i : i + 333], 1, 0.1, 4) for i in range(0, 10_000, 333)])
    assert np.array_equal(pieces, assign(rows, 1, 0.1, 4)), "independent of how the rows are chunked"
    counts = np.bincount(assign(rows, 1, 0.1, 4))
    assert counts.sum() == 10_000 and len(counts) == 5
    assert abs(counts[4] - 1000) < 150 and all(abs(c - 2250) < 200 for c in counts[:4])
