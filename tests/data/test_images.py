"""Images as teams keep them (scikit-learn's digits, real handwriting): a folder of class folders and a Parquet
table of PNG bytes ingested into uint8 partitions; damaged images, decompression bombs and wrong modes refused
in one line naming them (or skipped and counted); nothing outside the folder read; Spark's image struct."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from bench import digits
from snakeddp.data import images
from snakeddp.data.partitions import read_partition
from snakeddp.data.table import TableError, ingest
from tests.data.test_table import files_of


def params(path: Path, classes: int = 10, **table) -> dict:
    spec = {"path": str(path), "format": "auto", "features": [], "label": "label", "val_fraction": 0.2}
    return {
        "name": "d",
        "source": "table",
        "seed": 3,
        "num_train_files": 2,
        "num_classes": classes,
        "table": {**spec, "nan_policy": "error", "sha256": None, **table},
        "image": {"channels": 1},
    }


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return digits.write_folder(tmp_path_factory.mktemp("digits") / "digits", count=300)


def loaded(directory: Path, name: str):
    return read_partition(directory / f"{name}.safetensors", json.loads((directory / f"{name}.json").read_text()))


def test_a_folder_of_class_folders_becomes_uint8_partitions_byte_identical_when_ingested_twice(folder, tmp_path):
    first = ingest(params(folder), tmp_path / "first")
    ingest(params(folder), tmp_path / "second")
    assert files_of(tmp_path / "first") == files_of(tmp_path / "second")
    task = first["task"]
    assert task["classes"] == [str(n) for n in range(10)] and task["input_shape"] == [1, 8, 8]
    assert task["inputs"] == [{"column": "image", "kind": "image", "shape": [1, 8, 8]}]
    val = loaded(tmp_path / "first", "val")
    assert str(val.features.dtype) == "torch.uint8" and tuple(val.features.shape[1:]) == (1, 8, 8)
    # Row ids are the files in name order: class folder, then name; each image is its file's pixels.
    files = sorted(folder.rglob("*.png"), key=lambda p: p.relative_to(folder).as_posix())
    for row, label, pixels in zip(val.ids.tolist()[:5], val.labels.tolist(), val.features.numpy(), strict=False):
        assert int(files[row].parent.name) == label
        assert np.array_equal(np.asarray(Image.open(files[row])), pixels[0])


def test_a_parquet_table_of_png_bytes_gives_the_same_pixels_as_its_files(folder, tmp_path):
    table = digits.write_parquet(tmp_path / "digits.parquet", count=300)
    summary = ingest(params(table), tmp_path / "out")
    assert summary["task"]["inputs"][0]["kind"] == "image" and "classes" not in summary["task"]
    pixels, labels = digits.digits()
    part = loaded(tmp_path / "out", "train/part-00001")
    assert np.array_equal(part.features.numpy()[:, 0], pixels[part.ids.numpy()])
    assert np.array_equal(part.labels.numpy(), labels[part.ids.numpy()])


def test_images_are_resized_to_cover_and_centre_cropped_to_the_size_asked():
    wide = np.zeros((20, 40, 3), dtype=np.uint8)
    wide[:, 15:25] = 255  # a white bar in the middle, cut by nothing but the sides
    spec = images.ImageSpec(size=(10, 10), channels=3, max_pixels=10_000, max_bytes=10_000)
    out = images.decode(_encoded(Image.fromarray(wide)), spec)
    assert out.shape == (3, 10, 10) and out.dtype == np.uint8
    assert out[:, :, 5].min() == 255 and out[:, :, 0].max() == 0, "the middle of the image is kept"


def _encoded(image: Image.Image, fmt: str = "PNG") -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


def test_a_truncated_image_is_refused_in_one_line_naming_its_file(folder, tmp_path):
    damaged = tmp_path / "d"
    for path in folder.rglob("*.png"):
        (damaged / path.parent.name).mkdir(parents=True, exist_ok=True)
        (damaged / path.parent.name / path.name).write_bytes(path.read_bytes())
    broken = damaged / "3" / sorted(p.name for p in (damaged / "3").iterdir())[0]
    broken.write_bytes(broken.read_bytes()[:-30])
    with pytest.raises(TableError) as refused:
        ingest(params(damaged), tmp_path / "out")
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"{broken}: image refused: not a decodable image")
    assert line.endswith("or set data.table.nan_policy: drop to skip (and count) such images.")
    kept = ingest(params(damaged, nan_policy="drop"), tmp_path / "kept")
    assert kept["rows_dropped"] == 1 and sum(kept["records"].values()) == 299


def test_an_image_bomb_is_refused_before_its_pixels_are_decoded(tmp_path):
    # 12,000 x 12,000 black pixels: 144 M pixels, over Pillow's own limit too, in about 200 kB of PNG.
    bomb = _encoded(Image.new("L", (12_000, 12_000)))
    assert len(bomb) < 1_000_000
    rows = [digits.png(p) for p in digits.digits()[0][:40]]
    rows[17] = bomb
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"image": pa.array(rows, pa.binary()), "label": pa.array([0, 1] * 20)}), path)
    with pytest.raises(TableError) as refused:
        ingest(params(path, classes=2), tmp_path / "out")
    line = str(refused.value)
    # Pillow's own check, made an error at its warning's limit: it reads the size from the header only.
    assert line.startswith(f"{path}: column 'image', row 18: image refused: a decompression bomb (Image size ")
    assert "(144000000 pixels) exceeds limit" in line and "\n" not in line
    rows[17] = digits.png(digits.digits()[0][0])
    rows[3] = digits.png(np.zeros((8, 9), dtype=np.uint8))  # 72 pixels: over data.image.max_pixels below
    pq.write_table(pa.table({"image": pa.array(rows, pa.binary()), "label": pa.array([0, 1] * 20)}), path)
    with pytest.raises(TableError, match=r"row 4: image refused: 9x8 is 72 pixels, over the limit of 64"):
        ingest({**params(path, classes=2), "image": {"channels": 1, "max_pixels": 64}}, tmp_path / "out")


def test_a_16_bit_image_is_refused_naming_its_mode(tmp_path):
    spec = images.ImageSpec(size=None, channels=1, max_pixels=100, max_bytes=10_000)
    sixteen = Image.fromarray(np.full((4, 4), 4000, dtype=np.uint16))
    with pytest.raises(images.ImageRefused, match=r"mode I;16 has no 8-bit conversion"):
        images.decode(_encoded(sixteen), spec)


def test_a_link_out_of_the_folder_is_refused_naming_it(folder, tmp_path):
    linked = tmp_path / "linked"
    (linked / "0").mkdir(parents=True)
    (linked / "1").mkdir()
    (linked / "0" / "a.png").write_bytes(next(folder.rglob("*.png")).read_bytes())
    outside = tmp_path / "outside.png"
    outside.write_bytes(next(folder.rglob("*.png")).read_bytes())
    os.symlink(outside, linked / "1" / "b.png")
    with pytest.raises(
        TableError, match=r"1/b\.png: a link to a file outside .*linked; snakeddp reads nothing outside"
    ):
        ingest(params(linked, classes=2), tmp_path / "out")


def test_the_class_folders_must_match_num_classes(folder, tmp_path):
    with pytest.raises(
        TableError, match=r"10 class folders \(0, 1, 2, .*data.num_classes is 4. HINT: set data.num_classes: 10"
    ):
        ingest(params(folder, classes=4), tmp_path / "out")


def test_an_image_column_trains_alone(tmp_path):
    path = tmp_path / "t.parquet"
    rows = [digits.png(p) for p in digits.digits()[0][:10]]
    pq.write_table(
        pa.table({"content": pa.array(rows, pa.binary()), "length": [len(r) for r in rows], "label": [0, 1] * 5}), path
    )
    with pytest.raises(
        TableError, match=r"'content' is an image column, and an image column trains alone.*features: \[content\]"
    ):
        ingest(params(path, classes=2), tmp_path / "out")


def test_spark_image_structs_are_bgr_pixels_turned_rgb():
    rgb = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    row = {
        "origin": "file:/x.png",
        "height": 2,
        "width": 3,
        "nChannels": 3,
        "mode": 16,
        "data": rgb[:, :, ::-1].tobytes(),
    }
    spec = images.ImageSpec(size=None, channels=3, max_pixels=100, max_bytes=10_000)
    assert np.array_equal(images.from_spark(row, spec), rgb.transpose(2, 0, 1))
    with pytest.raises(images.ImageRefused, match="a truncated image"):
        images.from_spark({**row, "data": row["data"][:-1]}, spec)
    with pytest.raises(images.ImageRefused, match="mode 21 with 3 channels is not 8-bit"):
        images.from_spark({**row, "mode": 21}, spec)


@pytest.mark.e2e
def test_the_cnn_trains_on_a_folder_and_a_parquet_table_of_pngs_through_snakemake(workflow, tiny_config):
    digits.write_folder(workflow.directory / "digits")
    digits.write_parquet(workflow.directory / "digits.parquet")
    tiny_config["data"] = {
        "name": "digits",
        "source": "table",
        "num_train_files": 2,
        "num_classes": 10,
        "table": {"path": "digits", "label": "label", "val_fraction": 0.2},
        "image": {"channels": 1},
    }
    tiny_config["model"] = {"name": "cnn", "width": 16, "lr": 0.003}
    tiny_config["trainer"] = {"max_epochs": 6, "batch_size": 32, "monitor": {"metric": "val_acc", "mode": "max"}}
    tiny_config["sweep"] = {"data.table.path": ["digits", "digits.parquet"]}
    workflow.write_config(tiny_config)
    workflow.run()
    found = workflow.directory.glob("results/runs/*/provenance.json")
    records = {p.parent.name: json.loads(p.read_text()) for p in found}
    assert len(records) == 2
    for record in records.values():
        assert record["config"]["data"]["table"]["features"] == ["image"], "resolved when the workflow planned"
        assert record["training"]["best_val_acc"] > 0.9, record["training"]
        matrix = record["training"]["confusion"]["matrix"]
        assert len(matrix) == 10 and sum(map(sum, matrix)) == record["data"]["records"]["val"]
        assert record["data"]["inputs"] == [{"column": "image", "kind": "image", "shape": [1, 8, 8]}]
    folder_run = next(r for r in records.values() if r["config"]["data"]["table"]["path"] == "digits")
    assert folder_run["data"]["classes"] == [str(n) for n in range(10)]
    assert workflow.planned_jobs() == {}, "nothing reruns when nothing changed"
    report = (workflow.directory / "results" / "report" / "report.html").read_text()
    assert "Per class" in report
