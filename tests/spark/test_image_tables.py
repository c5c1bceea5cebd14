"""Delta tables of images as Spark writes them: scikit-learn's digits as PNG files in ``label=N/`` folders, read
by Spark's own ``binaryFile`` and ``image`` data sources (path, modificationTime, length, content; the image
struct: origin, height, width, nChannels, mode, data) and written by Spark's Parquet writer, then committed as
Delta tables in place by delta-rs (``convert_to_deltalake``): this machine reaches no Maven repository for
delta-spark's jars, so the data files are Spark's and the log is delta-rs's.

One local[1] SparkSession for the file (a JVM, about 10 s here): the data sources are the same code on a
cluster, and a standalone cluster would add its master, workers and executors to the suite for nothing the
tables show.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from deltalake import convert_to_deltalake

from bench import digits
from snakeddp.data.partitions import read_partition
from snakeddp.data.table import ingest

pytestmark = pytest.mark.dev_venv  # the spark profile's driver imports pyspark


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName("snakeddp-image-tables")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def hive_pngs(tmp_path_factory) -> Path:
    """The digits as ``label=N/NNNN.png``: Spark's partition discovery gives the label column."""
    root = tmp_path_factory.mktemp("pngs") / "digits"
    pixels, labels = digits.digits()
    for n, (image, label) in enumerate(zip(pixels, labels, strict=True)):
        folder = root / f"label={label}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{n:04d}.png").write_bytes(digits.png(image))
    return root


def delta_from_spark(spark, source: str, pngs: Path, out: Path) -> Path:
    """Spark reads the PNGs with its ``source`` data source and writes Parquet; delta-rs commits the files."""
    frame = spark.read.format(source)
    if source == "binaryFile":
        frame = frame.option("pathGlobFilter", "*.png")
    frame.load(str(pngs)).repartition(2).write.parquet(str(out))
    convert_to_deltalake(str(out))
    return out


def params(path: Path, features: list[str]) -> dict:
    table = {"path": str(path), "format": "auto", "features": features, "label": "label", "val_fraction": 0.2}
    return {
        "name": "d",
        "source": "table",
        "seed": 0,
        "num_train_files": 2,
        "num_classes": 10,
        "table": {**table, "nan_policy": "error", "sha256": None},
        "image": {"channels": 1},
    }


def test_sparks_image_source_struct_is_decoded_to_the_pngs_pixels(spark, hive_pngs, tmp_path):
    table = delta_from_spark(spark, "image", hive_pngs, tmp_path / "images")
    assert (table / "_delta_log").is_dir()
    summary = ingest(params(table, ["image"]), tmp_path / "out")
    assert summary["format"] == "parquet" and "delta" in summary
    assert summary["task"]["input_shape"] == [1, 8, 8]
    entry = json.loads((tmp_path / "out" / "val.json").read_text())
    val = read_partition(tmp_path / "out" / "val.safetensors", entry)
    # Which digit a row is: its origin in Spark's struct, read back from the data files.
    import pyarrow.parquet as pq

    rows = [r for f in sorted(table.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    assert len(rows) == 1797 and sum(summary["records"].values()) == 1797
    pixels, labels = digits.digits()
    for row_id, label, image in zip(val.ids.tolist()[:20], val.labels.tolist(), val.features.numpy(), strict=False):
        number = int(Path(rows[row_id]["image"]["origin"]).stem)
        assert rows[row_id]["image"]["nChannels"] == 1 and label == labels[number]
        assert np.array_equal(image[0], pixels[number])


@pytest.mark.e2e
def test_the_cnn_trains_on_a_delta_table_of_sparks_binary_files_through_snakemake(
    spark, hive_pngs, workflow, tiny_config
):
    delta_from_spark(spark, "binaryFile", hive_pngs, workflow.directory / "lake" / "digits")
    tiny_config["data"] = {
        "name": "digits",
        "source": "table",
        "num_train_files": 2,
        "num_classes": 10,
        # binaryFile's path, modificationTime and length describe the file; content is the image.
        "table": {"path": "lake/digits", "features": ["content"], "label": "label", "val_fraction": 0.2},
        "image": {"channels": 1},
    }
    tiny_config["model"] = {"name": "cnn", "width": 16, "lr": 0.003}
    tiny_config["trainer"] = {"max_epochs": 6, "batch_size": 32, "monitor": {"metric": "val_acc", "mode": "max"}}
    workflow.write_config(tiny_config)
    workflow.run()
    (record,) = [json.loads(p.read_text()) for p in workflow.directory.glob("results/runs/*/provenance.json")]
    assert record["config"]["data"]["table"]["version"] == 0 and record["config"]["data"]["table"]["table_id"]
    assert record["training"]["best_val_acc"] > 0.9, record["training"]
    assert workflow.planned_jobs() == {}, "nothing reruns when nothing changed"
