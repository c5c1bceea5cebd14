"""What every object store's tests check the same way (az://, s3://, gs://): a small Parquet table
to upload, a folder listed with each object's version, and ingestion byte-identical to a local copy
(of one file, and of a folder in hive layout). ``store`` is a test server's client (bench.azurite.Azurite,
tests/s3_server.py, tests/gcs_server.py)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from snakeddp.data import remote, source, table

FEATURES = ["x1", "x2", "x3"]


def frame(rows: int, seed: int):
    import pandas as pd

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, len(FEATURES)))
    return pd.DataFrame({**{n: x[:, j] for j, n in enumerate(FEATURES)}, "y": (x.sum(axis=1) > 0).astype(int)})


def parquet(rows: int, seed: int) -> bytes:
    buffer = io.BytesIO()
    frame(rows, seed).to_parquet(buffer, row_group_size=100)
    return buffer.getvalue()


def params(path: str, partitions: int = 3) -> dict:
    return {
        "source": "table", "seed": 0, "num_train_files": partitions, "num_classes": 1,
        "table": {"path": path, "format": "auto", "features": FEATURES, "label": "y", "val_fraction": 0.2,
                  "nan_policy": "error", "sha256": None},
    }  # fmt: skip


def check_folder_listing(store, holder: str, scheme: str) -> None:
    """A folder of two Parquet parts and a _SUCCESS marker, uploaded to ``holder`` of a real ``store``
    server: the listing has the parts with their ETags, and table_files reads them as one table."""
    etags = [store.upload(holder, f"folder/part-{i}.parquet", parquet(50, i)) for i in range(2)]
    store.upload(holder, "folder/_SUCCESS", b"")
    objects, single = remote.list_objects(f"{scheme}://{holder}/folder")
    assert not single
    assert [(o["name"], o["etag"]) for o in objects] == [("part-0.parquet", etags[0]), ("part-1.parquet", etags[1])]
    assert source.table_files(f"{scheme}://{holder}/folder") == (
        "parquet",
        [f"{scheme}://{holder}/folder/part-0.parquet", f"{scheme}://{holder}/folder/part-1.parquet"],
    )


def check_ingest_matches_local(store, holder: str, scheme: str, tmp_path) -> None:
    """One table ingested from the store and from a local copy writes byte-identical partitions."""
    data = parquet(1000, 3)
    store.upload(holder, "same.parquet", data)
    (tmp_path / "same.parquet").write_bytes(data)
    # Small chunks: the stream is read piece by piece, across row groups.
    from_store = table.ingest(params(f"{scheme}://{holder}/same.parquet"), tmp_path / "remote", chunk_rows=64)
    local = table.ingest(params(str(tmp_path / "same.parquet")), tmp_path / "local", chunk_rows=64)
    assert from_store["records"] == local["records"] and from_store["rows_read"] == 1000
    for name in ["val", *(f"train/part-{i:05d}" for i in range(3))]:
        assert (tmp_path / "remote" / f"{name}.safetensors").read_bytes() == (
            tmp_path / "local" / f"{name}.safetensors"
        ).read_bytes(), name


def upload_folder(store, holder: str, prefix: str, folder: Path) -> None:
    """Every file under a local ``folder`` to ``holder``/``prefix``/ (a copy of a table, names unchanged)."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        store.upload(holder, f"{prefix}/{path.relative_to(folder).as_posix()}", path.read_bytes())


def hive_folder(folder: Path, rows: int, seed: int):
    """A Parquet folder in hive layout, as pyarrow writes it: x3 (a feature) is 0, 1 or 2 in the folder's
    name (``x3=1/``), not in the files. Returns the rows in the order the table reads them (x3's folders
    in name order, each in the order written), x3 included."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = frame(rows, seed)
    data["x3"] = np.arange(rows) % 3
    pq.write_to_dataset(pa.Table.from_pandas(data, preserve_index=False), folder, partition_cols=["x3"])
    return data.sort_values("x3", kind="stable", ignore_index=True)


def check_hive_folder_matches_local(store, holder: str, scheme: str, tmp_path) -> None:
    """A hive-layout folder ingested from the store and from its local copy: every row, its partition
    values, and byte-identical partitions."""
    hive_folder(tmp_path / "hive", 600, 4)
    upload_folder(store, holder, "hive", tmp_path / "hive")
    from_store = table.ingest(params(f"{scheme}://{holder}/hive"), tmp_path / "hive-remote", chunk_rows=64)
    local = table.ingest(params(str(tmp_path / "hive")), tmp_path / "hive-local", chunk_rows=64)
    assert from_store["rows_read"] == local["rows_read"] == 600 and from_store["records"] == local["records"]
    for name in ["val", *(f"train/part-{i:05d}" for i in range(3))]:
        assert (tmp_path / "hive-remote" / f"{name}.safetensors").read_bytes() == (
            tmp_path / "hive-local" / f"{name}.safetensors"
        ).read_bytes(), name
