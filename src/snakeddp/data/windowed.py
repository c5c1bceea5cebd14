"""Where a windowed split's rows are written (snakeddp.data.split.windows): each train partition in place, opened
when the first window that feeds it is read and published as soon as the last one is: its file complete, synced
and at its final name, its checksum taken, its entry (``<name>.json``) written beside it. Validation takes a share
of every window, so it is complete, and published by the ingestion, at the end.

A partition's entry is written only once its file is in place, so an entry that exists names a complete file:
a reader that waits for ``train/part-00000.json`` may read that partition while later windows are still read.
An ingestion that stops (a bad value, a table that is not the one planned) removes its entries, then its files.

A partition's ids (the row numbers of its rows, in the order they are read) are known from the windows that feed
it before they are read (``ids_of``), so each file is hashed as it is written (snakeddp.data.inplace).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from snakeddp.data.inplace import InPlace
from snakeddp.data.split import Window, deal
from snakeddp.util.fsutil import atomic_write_json
from snakeddp.util.terminal import say


class Published:
    """The partition files of one windowed ingestion (``targets``: the train partitions, then validation)."""

    def __init__(
        self,
        paths: Sequence[Path],
        counts: Sequence[int],
        metadata: Sequence[Mapping[str, str]],
        feature: tuple[str, tuple[int, ...]],
        binary: bool,
        ids: Callable[[int], np.ndarray] | None = None,
    ) -> None:
        """``ids``: a target's ids (``ids_of``), where they are known before its rows are read."""
        self.paths, self.counts, self.metadata = list(paths), [int(n) for n in counts], list(metadata)
        self.feature, self.binary, self.ids = feature, binary, ids
        self.validation = len(self.paths) - 1
        self.open: dict[int, InPlace] = {}
        self.entries: dict[int, dict[str, Any]] = {}
        self._open(self.validation)

    def _open(self, target: int) -> None:
        path, n, meta = self.paths[target], self.counts[target], self.metadata[target]
        known = None if self.ids is None else [self.ids(target)]
        # Every partial file in train/ (target 0's folder), validation's too: Snakemake removes it with a killed job's.
        scratch = self.paths[0].parent
        self.open[target] = InPlace([path], [n], [meta], self.feature, self.binary, known, scratch)

    def begin(self, window: Window) -> None:
        """Open the partitions that ``window`` is the first to feed."""
        for target in window.span:
            if target not in self.open and target not in self.entries:
                self._open(target)

    def add(self, ids: np.ndarray, labels: np.ndarray, features: np.ndarray, targets: np.ndarray) -> None:
        """One chunk's rows, grouped by target (``targets`` sorted, each target's rows in row order)."""
        found, starts = np.unique(targets, return_index=True)
        stops = [*starts[1:], len(targets)]
        for target, start, stop in zip(found.tolist(), starts.tolist(), stops, strict=True):
            zero = np.zeros(stop - start, dtype=np.int64)
            self.open[target].add(ids[start:stop], labels[start:stop], features[start:stop], zero)

    def end(self, window: Window) -> None:
        """Publish the train partitions ``window`` completes: in place, hashed, and their entries written."""
        for target in window.completes:
            entry = self.open.pop(target).finish()[0]
            atomic_write_json(self.paths[target].with_suffix(".json"), entry)
            self.entries[target] = entry
            say(f"ingest: train partition {target} published ({entry['records']:,} rows)")

    def finish(self) -> list[dict[str, Any]]:
        """Validation complete too; every target's entry (its file in place), train partitions first."""
        self.entries[self.validation] = self.open.pop(self.validation).finish()[0]
        return [self.entries[target] for target in range(len(self.paths))]

    def abandon(self) -> None:
        """Remove what the ingestion began (it stopped): what is not in place yet, and the partitions it published,
        whose table may be the one refused (its identity is known once every file is read)."""
        while self.open:
            self.open.popitem()[1].abandon()
        for target in self.entries:
            self.paths[target].with_suffix(".json").unlink(missing_ok=True)
            self.paths[target].unlink(missing_ok=True)


def ids_of(found: Sequence[Window], seed: int, val_fraction: float, partitions: int) -> Callable[[int], np.ndarray]:
    """A target's ids under this windowed split: the row numbers dealt to it (``deal``) from each window that feeds
    it (every window feeds validation), in the order they are read. Validation's, taken when the ingestion begins,
    hash every row number once; a train partition's, those of the windows it lies on, each window's dealt once for
    the partitions it feeds, which open one after the other (at 1,000,000 rows in 3 windows, 16 partitions: 0.25-0.29
    s of CPU dealt again for each partition)."""

    @functools.lru_cache(maxsize=2)
    def dealt(index: int) -> tuple[np.ndarray, np.ndarray]:
        rows = found[index].row_numbers()
        return rows, deal(found[index], rows, seed, val_fraction, partitions)

    def ids(target: int) -> np.ndarray:
        pieces = [np.zeros(0, dtype=np.int64)]
        for index, window in enumerate(found):
            if target == partitions or target in window.span:
                rows, targets = dealt(index)
                pieces.append(rows[targets == target])
        return np.concatenate(pieces)

    return ids
