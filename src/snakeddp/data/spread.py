"""A table ingested in pieces by several workers at once (Spark tasks on a cluster's executors:
snakeddp.spark.ingest; a Slurm array job's tasks: snakeddp.slurm.ingest), then assembled into the partition
files a local ingestion writes, byte for byte.

A piece is one window of the windowed split (snakeddp.data.split.windows: row groups in a seeded order, at
least 2^18 rows), whose rows are dealt over its partitions by their row numbers alone, so every target's count
in it is known before it is read. A worker reads its window's row groups in the window's order, checks and
encodes every row as a local ingestion does (the same one-line messages, naming file, column and row) and
writes each target's rows into that target's region of one piece file. As soon as the pieces that feed a
partition are read, the assembler writes it as its header followed, tensor by tensor, by their regions in
window order: a partition's rows in the order a local ingestion reads them, so the same bytes
(tests/spark/test_spread_ingest.py compares them). It is synced, hashed (BLAKE3, the manifest's) and
published with its entry written last, as data.windowed publishes; an ingestion that stops removes what it
published. The pieces lie in train/.pieces (``pieces_folder``), inside the data_table rule's directory output:
Snakemake removes a failed job's outputs, and a killed one's before its rerun, so a killed ingestion leaves
nothing outside them; a finished one removes them. The table's identity is checked while the workers read, as
a local ingestion checks it (identity.Check).

Only a table of two windows or more is spread (a smaller one keeps the global split, and is not worth a
cluster's tasks); ``ingest`` returns None for any other, which the step then ingests itself.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from snakeddp.config import parts
from snakeddp.data import columns as cols
from snakeddp.data import delta, pagecache
from snakeddp.data import names as data_names
from snakeddp.data import table as tables
from snakeddp.data.inplace import write_blocks
from snakeddp.data.layout import chunk_rows, layout_of, probe_rows
from snakeddp.data.partitions import encode_header
from snakeddp.data.source import Source, TableFile, delta_snapshot, features_of, open_source
from snakeddp.data.split import WINDOW_ROWS, RowGroup, Window, check_empty, deal, known_counts, windows_of
from snakeddp.errors import TableError
from snakeddp.util.fsutil import atomic_write_json, stat_stamp
from snakeddp.util.hashing import partition_file_checksum
from snakeddp.util.terminal import say

# The folder of the workers' pieces, in the ingestion's train/ (``pieces_folder``; removed once assembled).
PIECES = ".pieces"
# Bytes copied at a time where the file system cannot copy a range itself.
COPY_BYTES = 16 << 20


@dataclass(frozen=True)
class Work:
    """What every worker needs, the same for all pieces: shipped to each once."""

    params: Mapping[str, Any]
    source: Source
    layout: cols.Layout
    rows: int
    """Rows per chunk."""
    out: str
    """The ingestion's output folder (absolute: a worker's working directory is its own)."""
    directory: str
    """The step's working directory, where a relative table path is read from."""

    @property
    def folder(self) -> str:
        """Where the piece files go."""
        return str(pieces_folder(self.out))


def pieces_folder(out: str | Path) -> Path:
    """The pieces' folder of the ingestion into ``out``: inside train/, the data_table rule's directory output,
    which Snakemake removes where the job fails, and before its rerun where it was killed; so nothing of an
    ingestion is ever left outside the rule's outputs (the manifest and training name train/'s partitions one by
    one: a hidden folder there is none of them)."""
    return Path(out) / data_names.TRAIN / PIECES


def read_piece(work: Work, piece: Window) -> dict[str, Any]:
    """A worker's part: the piece's row groups read in its order, checked, encoded and written to its file."""
    began = time.time()  # the wall clock: pieces read on other machines are compared by it (the summary's span)
    os.chdir(work.directory)
    params, source = work.params, work.source
    counts = piece_counts(params, piece)
    sink = PieceFile(piece_path(work.folder, piece.index), counts, work.layout.feature_spec(), _binary(params))
    try:
        for file, groups in itertools.groupby(piece.groups, key=lambda g: g.file):
            _read_groups(work, piece, source.files[file], list(groups), sink)
        sink.finish()
    except BaseException:
        sink.abandon()
        raise
    reader = [socket.gethostname(), os.getpid()]
    return {"index": piece.index, "rows": piece.rows, "reader": reader, "began": began, "ended": time.time()}


def _read_groups(work: Work, piece: Window, unit: TableFile, groups: list[RowGroup], sink: PieceFile) -> None:
    """Row groups of one file, read in the given order: each chunk's rows checked, encoded and handed to the
    sink grouped by target, with the messages of a local ingestion (table._read_unit: file, column and row)."""
    source, layout, params = work.source, work.layout, work.params
    table, label = source.table, source.table.label
    classes, partitions = params["num_classes"], params["num_train_files"]
    # A row group's first row in its file (messages count a file's rows), and each row's number in the table.
    footer = source.footer(unit)
    before = np.cumsum([0, *(footer.row_group(g).num_rows for g in range(footer.num_row_groups))])
    in_file = np.concatenate([np.arange(before[g.group], before[g.group] + g.rows, dtype=np.int64) for g in groups])
    in_table = np.concatenate([np.arange(g.first_row, g.first_row + g.rows, dtype=np.int64) for g in groups])
    where_of, at = source.where(unit), 0
    wanted, text = (
        [*(c.name for c in layout.columns), label],
        [c.name for c in layout.columns if c.kind == cols.CATEGORY],
    )
    for chunk in source.chunks(unit, wanted, work.rows, text, [g.group for g in groups]):
        n = len(chunk[label])
        rows, file_rows = in_table[at : at + n], in_file[at : at + n]
        first = int(file_rows[0])  # a chunk lies in one row group: its rows follow each other in the file
        labels = cols.numbers(chunk[label], where_of, label, first, label=True)
        targets = deal(piece, rows, params["seed"], table.val_fraction, partitions)
        order = np.argsort(targets, kind="stable")
        values, usable = layout.encode(chunk, n, where_of, first, order)
        finite = usable & np.isfinite(labels[order])
        if not finite.all():
            bad = int(np.flatnonzero(~finite)[np.argmin(order[~finite])])
            column = layout.first_bad(values[bad]) if not usable[bad] else label
            raise TableError(
                f"{where_of(column, int(file_rows[order[bad]]))}: missing or non-finite value. "
                "HINT: clean the table, or set data.table.nan_policy: drop to skip such rows."
            )
        tables.check_labels(labels[order], file_rows[order], classes, unit.path, label)
        sink.add(rows[order], labels[order], values, targets[order])
        at += n


def _specs(n: int, feature: tuple[str, tuple[int, ...]], binary: bool) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """A partition's tensors for ``n`` rows, as table.InPlace lays them out."""
    return {
        "features": (np.dtype(feature[0]), (n, *feature[1])),
        "labels": (np.dtype("<f4"), (n, 1)) if binary else (np.dtype("<i8"), (n,)),
        "ids": (np.dtype("<i8"), (n,)),
    }


def _nbytes(spec: tuple[np.dtype, tuple[int, ...]]) -> int:
    return spec[0].itemsize * int(np.prod(spec[1], dtype=np.int64))


def regions(
    counts: Sequence[int], feature: tuple[str, tuple[int, ...]], binary: bool
) -> list[dict[str, tuple[int, int]]]:
    """Per target, each tensor's (offset, bytes) in a piece file: targets one after the other, each target's
    tensors in the order its partition file holds them."""
    found, offset = [], 0
    for n in counts:
        specs = _specs(int(n), feature, binary)
        _, order = encode_header(specs, {})
        placed = {}
        for name in order:
            placed[name] = (offset, _nbytes(specs[name]))
            offset += placed[name][1]
        found.append(placed)
    return found


class PieceFile:
    """One piece's rows, each target's tensors at their regions (``regions``), filled chunk by chunk."""

    def __init__(self, path: Path, counts: Sequence[int], feature: tuple[str, tuple[int, ...]], binary: bool) -> None:
        self.path, self.binary = path, binary
        self.partial = path.with_name(f".{path.name}.partial")
        self.regions = regions(counts, feature, binary)
        self.cursor = [{name: start for name, (start, _) in r.items()} for r in self.regions]
        self.fd = os.open(self.partial, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o666)
        last = self.regions[-1] if self.regions else {}
        os.ftruncate(self.fd, max((s + n for s, n in last.values()), default=0))

    def add(self, ids: np.ndarray, labels: np.ndarray, features: np.ndarray, targets: np.ndarray) -> None:
        """A chunk's rows, grouped by target as ingestion hands them to its sinks (``targets`` sorted)."""
        arrays = {
            "ids": ids.astype("<i8", copy=False),
            "labels": labels.astype("<f4" if self.binary else "<i8"),
            "features": features,
        }
        bounds = np.searchsorted(targets, np.arange(len(self.regions) + 1))
        writes = []
        for target, cursor in enumerate(self.cursor):
            start, stop = int(bounds[target]), int(bounds[target + 1])
            for name in cursor if stop > start else ():
                data = np.ascontiguousarray(arrays[name][start:stop])
                if cursor[name] + data.nbytes > sum(self.regions[target][name]):
                    raise TableError(
                        f"{self.path.name}: more rows than the table's files said they hold (a file changed while it "
                        "was read). HINT: rerun once the table is no longer being written."
                    )
                writes.append((self.fd, data, cursor[name]))
                cursor[name] += data.nbytes
        write_blocks(writes)

    def finish(self) -> None:
        ends = [{name: start + n for name, (start, n) in r.items()} for r in self.regions]
        if self.cursor != ends:
            raise TableError(
                f"{self.path.name}: fewer rows than the table's files said they hold (a file changed while it was "
                "read). HINT: rerun once the table is no longer being written."
            )
        os.close(self.fd)
        self.fd = -1
        os.replace(self.partial, self.path)

    def abandon(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.partial.unlink(missing_ok=True)


def piece_counts(params: Mapping[str, Any], piece: Window) -> np.ndarray:
    """Rows per target (train partitions, then validation) among the piece's rows."""
    partitions = params["num_train_files"]
    val_fraction = parts.Table.of(params["table"]).val_fraction
    targets = deal(piece, piece.row_numbers(), params["seed"], val_fraction, partitions)
    return np.bincount(targets, minlength=partitions + 1)


def piece_path(folder: str | Path, index: int) -> Path:
    return Path(folder) / f"piece-{index:05d}.bin"


def _binary(params: Mapping[str, Any]) -> bool:
    return params["num_classes"] == 1


#: How pieces are read: the workers of a platform, given the work, the pieces and what to hand each piece's
#: read_piece result to as soon as it is read (it publishes the partitions that piece completes).
Workers = Callable[[Work, list[Window], Callable[[dict[str, Any]], None]], None]


def in_this_process(work: Work, pieces: list[Window], done: Callable[[dict[str, Any]], None]) -> None:
    """Every piece read here, one after the other (the assembly's tests, without a cluster)."""
    here = os.getcwd()
    try:
        for piece in pieces:
            done(read_piece(work, piece))
    finally:
        os.chdir(here)


def prepare(params: Mapping[str, Any], out: Path) -> tuple[Work, list[Window]] | None:
    """The work and its pieces where the table is spread (module docstring), else None."""
    table = parts.Table.of(params["table"])
    snapshot = delta_snapshot(table)
    source = open_source(table, snapshot)
    # A file of no rows is said by a local ingestion (its footer has no row group a piece would read).
    if known_counts(source, params) is None or not all(source.footer(f).num_rows for f in source.files):
        return None
    pieces = windows_of(source, params["seed"], params["num_train_files"])
    if pieces is None or len(pieces) < 2:
        return None
    features = features_of(table, source)
    if snapshot is not None:
        delta.require_columns(table.path, snapshot, [*features, table.label])
    layout = layout_of(source, features, params.get("image") or {}, probe_rows(features))
    if layout.image is not None:
        return None
    return Work(dict(params), source, layout, chunk_rows(source, layout), str(out.resolve()), os.getcwd()), pieces


def ingest(params: Mapping[str, Any], out_dir: str | Path, workers: Workers, said: str) -> dict[str, Any] | None:
    """table.ingest's outputs, the table read in pieces by ``workers`` (``said``: by whom, for the log), each
    partition published as soon as the pieces that feed it are read; None where the table is not spread (the
    caller then ingests it itself)."""
    out = Path(out_dir)
    prepared = prepare(params, out)
    if prepared is None:
        return None
    work, pieces = prepared
    source, partitions = work.source, params["num_train_files"]
    assembly = Assembly(work, pieces, out)
    counts = assembly.totals
    check_empty(source.table, [t for t in range(partitions + 1) if counts[t] == 0], int(counts.sum()), partitions)
    Path(work.folder).mkdir(parents=True, exist_ok=True)
    shipped = replace(work, source=replace(source, footers={}))  # a worker reads the footers of its own files
    check = tables.identity_check(source.table, source.snapshot)
    say(f"ingest: {sum(p.rows for p in pieces):,} rows in {len(pieces)} pieces, read {said}")
    try:
        reading = check.reading([f.path for f in source.files]) if check else contextlib.nullcontext()
        begun = time.monotonic()
        with reading:
            workers(shipped, pieces, assembly.piece_read)
        if check is not None:
            check.finish()
        entries = assembly.finish()
    except BaseException:
        assembly.abandon()
        raise
    finally:
        if check is not None:
            check.close()
        shutil.rmtree(work.folder, ignore_errors=True)
    results = assembly.results
    seconds = {
        "read_s": round(assembly.read_at - begun, 3),
        # From the first piece begun to the last one read: the reading itself, without a cluster's start.
        "pieces_s": round(max(r["ended"] for r in results) - min(r["began"] for r in results), 3),
        "assemble_s": round(assembly.assembling_s, 3),
    }
    return _record(work, pieces, out, entries, [r["reader"] for r in results], seconds)


class Assembly:
    """The partitions of one spread ingestion, each written from the pieces' regions in window order, hashed and
    published (its entry written last, as data.windowed publishes) once every piece that feeds it is read."""

    def __init__(self, work: Work, pieces: Sequence[Window], out: Path) -> None:
        self.work, self.pieces, self.out = work, list(pieces), out
        self.partitions = work.params["num_train_files"]
        self.feature, self.binary = work.layout.feature_spec(), _binary(work.params)
        self.counts = [piece_counts(work.params, p) for p in self.pieces]
        self.totals = sum(self.counts, np.zeros(self.partitions + 1, dtype=np.int64))
        self.placed = [regions(c, self.feature, self.binary) for c in self.counts]
        self.read: dict[int, dict[str, Any]] = {}
        self.entries: dict[int, dict[str, Any]] = {}
        self.read_at, self.assembling_s = time.monotonic(), 0.0
        self.lock = threading.Lock()  # workers may hand their pieces over from several threads

    @property
    def results(self) -> list[dict[str, Any]]:
        return [self.read[p.index] for p in self.pieces]

    def piece_read(self, result: dict[str, Any]) -> None:
        """A worker's piece is in its file: each partition now complete is published."""
        with self.lock:
            self.read[int(result["index"])] = result
            self.read_at = time.monotonic()
            begun = time.monotonic()
            for target in range(self.partitions + 1):
                feeding = [p.index for p, c in zip(self.pieces, self.counts, strict=True) if c[target]]
                if target not in self.entries and all(i in self.read for i in feeding):
                    self.entries[target] = self._publish(target)
            self.assembling_s += time.monotonic() - begun

    def finish(self) -> list[dict[str, Any]]:
        missing = [p.index for p in self.pieces if p.index not in self.read]
        if missing or len(self.entries) != self.partitions + 1:
            raise TableError(
                f"{self.out}: the workers read {len(self.read)} of the table's {len(self.pieces)} pieces (not "
                f"{', '.join(map(str, missing))}). HINT: rerun."
            )
        return [self.entries[t] for t in range(self.partitions + 1)]

    def abandon(self) -> None:
        """Remove what was published: an ingestion that stops leaves no partition (data.windowed does the same)."""
        with self.lock:
            for target in self.entries:
                for suffix in (".json", ".safetensors"):
                    (self.out / f"{_name(target, self.partitions)}{suffix}").unlink(missing_ok=True)
            self.entries.clear()

    def _publish(self, target: int) -> dict[str, Any]:
        """One partition (or validation) written, synced, in place and hashed; its entry written beside it."""
        n = int(self.totals[target])
        specs = _specs(n, self.feature, self.binary)
        metadata = tables.partition_metadata(target, self.partitions)
        header, order = encode_header(specs, metadata)
        path = self.out / f"{_name(target, self.partitions)}.safetensors"
        path.parent.mkdir(parents=True, exist_ok=True)
        # In train/, validation's too (then moved beside it): where Snakemake removes a killed ingestion's.
        partial = pieces_folder(self.out).parent / f".{path.name}.partial"
        fd = os.open(partial, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o666)
        try:
            os.write(fd, header)
            at = len(header)
            for name in order:
                for piece, placed in zip(self.pieces, self.placed, strict=True):
                    start, size = placed[target][name]
                    if size:  # a piece that feeds other partitions only may not be read yet
                        with open(piece_path(self.work.folder, piece.index), "rb") as handle:
                            _copy(handle.fileno(), fd, start, at, size)
                    at += size
            os.fsync(fd)
        except BaseException:
            partial.unlink(missing_ok=True)  # a full disk: no partial file left beside the complete ones
            raise
        finally:
            os.close(fd)
        os.replace(partial, path)
        checksum = partition_file_checksum(path)
        if not pagecache.read_next(metadata):  # as data.inplace: only what training reads first stays cached
            pagecache.drop(path)
        entry = {
            "file": path.name,
            **checksum,
            "bytes": at,
            "records": n,
            "tensors": {k: {"dtype": str(d), "shape": list(s)} for k, (d, s) in specs.items()},
        }
        task = {"task": tables.task_of(self.work.params, self.work.layout)} if target == self.partitions else {}
        atomic_write_json(self.out / f"{_name(target, self.partitions)}.json", {**entry, **task})
        say(f"ingest: {'validation' if task else f'train partition {target}'} published ({n:,} rows)")
        return entry


def _copy(source: int, target: int, start: int, at: int, size: int) -> None:
    """``size`` bytes from ``start`` in one file to ``at`` in another: by the file system where it can."""
    while size:
        try:
            done = os.copy_file_range(source, target, size, start, at)
        except OSError as error:
            if error.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            done = os.pwrite(target, os.pread(source, min(size, COPY_BYTES), start), at)
        if not done:
            raise OSError(errno.EIO, "a piece file ended before its rows")
        start, at, size = start + done, at + done, size - done


def _name(target: int, partitions: int) -> str:
    return data_names.VALIDATION if target == partitions else data_names.train_partition(target)


def _record(
    work: Work,
    pieces: Sequence[Window],
    out: Path,
    entries: list[dict[str, Any]],
    readers: list[Any],
    seconds: Mapping[str, float],
) -> dict[str, Any]:
    """written.json and ingest.json, as table.ingest writes them."""
    params, source = work.params, work.source
    partitions = params["num_train_files"]
    names = [_name(t, partitions) for t in range(partitions + 1)]
    task = tables.task_of(params, work.layout)
    atomic_write_json(out / tables.WRITTEN, {name: stat_stamp(out / f"{name}.safetensors") for name in names})
    rows = sum(p.rows for p in pieces)
    summary = {
        "generator": tables.GENERATOR,
        "format": source.fmt,
        "files": [{"file": str(f.path), "rows": source.footer(f).num_rows} for f in source.files],
        "rows_read": rows,
        "rows_dropped": 0,
        "records": {"train": sum(e["records"] for e in entries[:-1]), "val": entries[-1]["records"]},
        "task": task,
        # As table.ingest says it: the windows dealt the rows (a spread table is always split by windows).
        "split": {"windows": len(pieces), "window_rows": WINDOW_ROWS},
        "pieces": len(pieces),
        "readers": readers,  # each piece's (host, process)
        # The workers' read (a Spark application's start included) and the assembly, checksums included.
        **seconds,
    }
    if source.snapshot is not None:
        summary["delta"] = {"table_id": source.snapshot.table_id, "version": source.snapshot.version}
    atomic_write_json(out / "ingest.json", summary)
    say(f"ingest: {rows:,} rows read into {partitions} train partitions and validation, in {len(pieces)} pieces")
    return summary
