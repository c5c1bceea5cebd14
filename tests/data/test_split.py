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


def _groups(sizes_per_file):
    from snakeddp.data.split import row_groups

    return row_groups(sizes_per_file)


def test_windows_cover_every_row_group_once_in_a_seeded_order_each_of_at_least_the_window_rows():
    from snakeddp.data.split import windows

    groups = _groups([[1000] * 7, [500] * 9, [1300, 200]])
    found = windows(groups, seed=3, partitions=4, min_rows=2000)
    read = [g for w in found for g in w.groups]
    assert sorted(read, key=lambda g: g.first_row) == groups, "every row group in exactly one window"
    assert read != groups, "read in a seeded order, not the files' order"
    assert all(w.rows >= 2000 for w in found) and sum(w.rows for w in found) == 13_000
    assert [w.index for w in found] == list(range(len(found)))
    again = windows(groups, seed=3, partitions=4, min_rows=2000)
    assert again == found, "the same seed gives the same windows"
    assert [g for w in windows(groups, seed=4, partitions=4, min_rows=2000) for g in w.groups] != read
    assert windows(groups, seed=3, partitions=4, min_rows=13_001) is None, "fewer rows than a window: global split"


def test_windows_feed_consecutive_partitions_and_say_which_each_completes():
    from snakeddp.data.split import windows

    for groups, parts in ((_groups([[100] * 50]), 3), (_groups([[100] * 12]), 9), (_groups([[100] * 40]), 8)):
        found = windows(groups, seed=1, partitions=parts, min_rows=300)
        fed = [p for w in found for p in w.span]
        assert sorted(set(fed)) == list(range(parts)) and fed == sorted(fed), "consecutive, every partition fed"
        completed = [p for w in found for p in w.completes]
        assert completed == list(range(parts)), "each completed once, in order"
        for w in found:
            assert all(p not in later.span for later in found[w.index + 1 :] for p in w.completes)
    few = windows(_groups([[100] * 12]), seed=1, partitions=9, min_rows=300)
    assert few[0].completes, "with fewer windows than partitions, the first window completes partitions"


def test_deal_uses_the_row_hash_within_the_windows_span_and_counts_are_known_before_reading():
    from snakeddp.data.split import deal, window_counts, windows

    groups = _groups([[700] * 30, [333] * 11])
    found = windows(groups, seed=7, partitions=5, min_rows=2500)
    counts = np.zeros(6, dtype=np.int64)
    for w in found:
        rows = w.row_numbers()
        targets = deal(w, rows, 7, 0.2, 5)
        assert set(targets.tolist()) <= {*w.span, 5}
        # Validation is the same rows as the global split's: the hash alone, below val_fraction.
        assert np.array_equal(targets == 5, assign(rows, 7, 0.2, 5) == 5)
        pieces = np.concatenate([deal(w, rows[i : i + 97], 7, 0.2, 5) for i in range(0, len(rows), 97)])
        assert np.array_equal(pieces, targets), "independent of how the rows are chunked"
        counts += np.bincount(targets, minlength=6)
    assert np.array_equal(window_counts(found, 7, 0.2, 5), counts) and counts.sum() == 21_000 + 3_663
    assert all(c > 0 for c in counts)


def test_a_parquet_tables_windows_come_from_its_footers_and_small_or_csv_tables_keep_the_global_split(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from snakeddp.config import parts
    from snakeddp.data.source import open_source
    from snakeddp.data.split import windows_of
    from tests.tables import params

    folder = tmp_path / "t"
    folder.mkdir()
    for i, n in enumerate((3000, 1000)):
        pq.write_table(
            pa.table({"x": np.arange(n, dtype="f4"), "y": np.zeros(n)}), folder / f"{i}.parquet", row_group_size=500
        )
    table = parts.Table.of(params(folder, features=["x"])["table"])
    found = windows_of(open_source(table, None), 1, 2, min_rows=1000)
    assert [len(w.groups) for w in found] == [2, 2, 2, 2]
    assert {(g.file, g.group) for w in found for g in w.groups} == {(0, g) for g in range(6)} | {(1, 0), (1, 1)}
    assert windows_of(open_source(table, None), 1, 2, min_rows=4001) is None


def test_every_train_partition_gets_its_share_of_the_rows_whatever_the_number_of_windows():
    """Windows lie side by side along the partitions by their rows: five windows over four partitions give each
    a quarter of the train rows (one window each would have left partition 0 twice the others)."""
    from snakeddp.data.split import deal, window_counts, windows

    for files, parts in (([[1000] * 50], 4), ([[1000] * 30, [2500] * 4], 3), ([[1000] * 12], 9), ([[10_000] * 7], 2)):
        found = windows(_groups(files), seed=2, partitions=parts, min_rows=10_000)
        counts = window_counts(found, 2, 0.1, parts)
        train = counts[:parts]
        assert abs(train - train.mean()).max() < 0.1 * train.mean(), (files, parts, counts)
        for w in found:
            targets = deal(w, w.row_numbers(), 2, 0.1, parts)
            assert set(targets[targets < parts].tolist()) <= set(w.span)
