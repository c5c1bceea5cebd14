"""Synthetic data: a pure function of its parameters, with learnable or random labels."""

import blake3
import numpy as np
import pytest

from snakeddp import config
from snakeddp.data import synthetic
from snakeddp.data.generate import write_synthetic


@pytest.fixture
def params():
    data = config.validate({"data": {"num_records_per_train_file": 2000, "num_val_records": 500, "num_features": 16}})[
        "data"
    ]
    return {k: v for k, v in data.items() if k != "num_train_files"}


def test_partition_is_a_pure_function_of_seed_params_and_index(params):
    first = synthetic.generate(params, "train", 3)
    again = synthetic.generate(params, "train", 3)
    other = synthetic.generate(params, "train", 4)
    reseeded = synthetic.generate({**params, "seed": 1}, "train", 3)
    for name in ("features", "labels", "ids"):
        np.testing.assert_array_equal(first[name], again[name])
    assert not np.array_equal(first["features"], other["features"])
    assert not np.array_equal(first["features"], reseeded["features"])


def test_ids_are_global_and_disjoint_across_partitions(params):
    a, b = synthetic.generate(params, "train", 0)["ids"], synthetic.generate(params, "train", 1)["ids"]
    assert a[0] == 0 and b[0] == 2000 and len(np.intersect1d(a, b)) == 0


def test_teacher_labels_are_learnable(params):
    """A linear probe fit on one partition predicts the validation labels far above chance."""
    train, val = synthetic.generate(params, "train", 0), synthetic.generate(params, "val")
    x, y = train["features"].astype(np.float64), train["labels"][:, 0] * 2 - 1
    w, *_ = np.linalg.lstsq(x, y, rcond=None)
    accuracy = np.mean((val["features"] @ w > 0) == (val["labels"][:, 0] > 0.5))
    assert accuracy > 0.85
    # label_noise flips to a random class, so about noise/2 of the labels disagree with the teacher
    assert 0.3 < train["labels"].mean() < 0.7


def test_random_labels_are_not_learnable(params):
    noisy = {**params, "labels": "random"}
    train, val = synthetic.generate(noisy, "train", 0), synthetic.generate(noisy, "val")
    w, *_ = np.linalg.lstsq(train["features"].astype(np.float64), train["labels"][:, 0] * 2 - 1, rcond=None)
    accuracy = np.mean((val["features"] @ w > 0) == (val["labels"][:, 0] > 0.5))
    assert abs(accuracy - 0.5) < 0.1


def test_multiclass_labels(params):
    multi = {**params, "num_classes": 5}
    labels = synthetic.generate(multi, "train", 0)["labels"]
    assert labels.dtype == np.int64 and labels.shape == (2000,)
    assert set(np.unique(labels)) == set(range(5))
    assert synthetic.task(multi) == {"num_features": 16, "num_classes": 5, "kind": "multiclass"}


def test_binary_labels_match_the_tutorial_layout(params):
    data = synthetic.generate(params, "val")
    assert data["features"].dtype == np.float32 and data["features"].shape == (500, 16)
    assert data["labels"].dtype == np.float32 and data["labels"].shape == (500, 1)
    assert set(np.unique(data["labels"])) == {0.0, 1.0}


def test_unknown_split_is_rejected(params):
    with pytest.raises(ValueError, match="split must be"):
        synthetic.generate(params, "test")


# BLAKE3 of files written by earlier releases (the code as of stop 20): generation may change how
# it computes, never what it writes, or every finished pipeline would regenerate and retrain.
# The teacher's logits are computed a block of rows at a time: whatever the block, the same bytes.
EARLIER_RELEASES = {
    (1, "train", 2): ("863141772c7bd550bb89a23df9cb9afe0e7dd28ee49d006d9c4bb337250b0d6a", 180304),
    (1, "val", 0): ("8f8a1a14fe42a58ede95f45702b21ec662f4de543b5f3de18af5d83b2dffb2d5", 11088),
    (4, "train", 2): ("73e22d653607a2ce33ce0f53719c9fe9cbe5de7dd345388b0f6ca9b320190456", 200296),
    (4, "val", 0): ("b07835e0bc921d4c1ddfcb50ee5ba60523931cd24aff00f9de360db35af775c5", 12288),
}


@pytest.mark.parametrize("block_bytes", [None, 8 * 6 * 7, 8 * 6])
@pytest.mark.parametrize(("classes", "split", "index"), sorted(EARLIER_RELEASES))
def test_partition_files_are_byte_identical_to_earlier_releases(
    tmp_path, monkeypatch, classes, split, index, block_bytes
):
    if block_bytes is not None:  # blocks of 7 rows, then of 1
        monkeypatch.setattr(synthetic, "_LOGIT_BLOCK_BYTES", block_bytes)
    params = {
        "name": "t",
        "source": "synthetic",
        "seed": 11,
        "num_records_per_train_file": 5000,
        "num_val_records": 300,
        "num_features": 6,
        "num_classes": classes,
        "labels": "teacher",
        "label_noise": 0.1,
    }
    entry = write_synthetic(params, split, index, tmp_path / "p.safetensors", tmp_path / "p.json")
    assert (entry["blake3"], entry["bytes"]) == EARLIER_RELEASES[(classes, split, index)]
    assert blake3.blake3((tmp_path / "p.safetensors").read_bytes()).hexdigest() == entry["blake3"]
