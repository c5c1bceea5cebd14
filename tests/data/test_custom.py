"""The DataModule of a run: snakeddp's by default, the user's by data.module, with its contract."""

from __future__ import annotations

import json
import textwrap

import pytest

from snakeddp import config
from snakeddp.config import parts
from snakeddp.data.custom import build_datamodule as build_from_parts
from snakeddp.data.custom import describe, shards_itself, task_of, write_module_record
from snakeddp.data.generate import write_dataset_manifest, write_synthetic
from snakeddp.data.module import PartitionDataModule

USER_MODULE = """
import lightning.pytorch as pl

from snakeddp.data.module import PartitionDataModule


class Images(pl.LightningDataModule):
    task = {"num_features": 3, "num_classes": 2}

    def __init__(self, root, batch_size, manifest_path=None):
        super().__init__()
        self.root, self.batch_size, self.manifest_path = root, batch_size, manifest_path


class Augmented(PartitionDataModule):
    def __init__(self, manifest_path, batch_size, seed, noise=0.0):
        super().__init__(manifest_path, batch_size, seed)
        self.noise = noise
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "mydata.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.fixture
def manifest(tmp_path):
    params = {
        "name": "s",
        "source": "synthetic",
        "seed": 0,
        "num_records_per_train_file": 8,
        "num_val_records": 8,
        "num_features": 2,
        "num_classes": 1,
        "labels": "teacher",
        "label_noise": 0.0,
    }
    (tmp_path / "train").mkdir()
    write_synthetic(params, "train", 0, tmp_path / "train/part-00000.safetensors", tmp_path / "train/part-00000.json")
    write_synthetic(params, "val", 0, tmp_path / "val.safetensors", tmp_path / "val.json")
    path = tmp_path / "manifest-1.json"
    write_dataset_manifest(path, "s-0123456789", params, [tmp_path / "train/part-00000.json"], tmp_path / "val.json")
    return path


def run_cfg(**data):
    return config.validate({"data": data, "trainer": {"batch_size": 16}})


def build_datamodule(cfg, manifest_path):
    """build_datamodule on a config's data and trainer parts, as snakeddp.train builds them."""
    return build_from_parts(parts.Data.of(cfg["data"]), parts.Trainer.of(cfg["trainer"]), cfg["seed"], manifest_path)


def test_default_is_snakeddps_partition_loader(manifest):
    data = build_datamodule(run_cfg(), manifest)
    assert type(data) is PartitionDataModule and shards_itself(data) and task_of(data)["num_features"] == 2
    assert describe(data, manifest, "abc")["partitions"] == 1


def test_module_source_gets_no_manifest_and_its_kwargs(user_module, tmp_path):
    cfg = run_cfg(source="module", module="mydata:Images", module_kwargs={"root": "/data/images"})
    data = build_datamodule(cfg, tmp_path / "module.json")
    assert (data.root, data.batch_size, data.manifest_path) == ("/data/images", 16, None)
    assert not shards_itself(data), "Lightning's DistributedSampler shards a DataModule of its own"
    assert task_of(data) == {"num_features": 3, "num_classes": 2}
    record = tmp_path / "module.json"
    write_module_record(record, "images-0123456789", {"module": "mydata:Images"})
    assert describe(data, record, "abc") == {
        "manifest": str(record),
        "manifest_sha256": "abc",
        "dataset": "images-0123456789",
        "partitions": None,
        "records": None,
    }


def test_subclass_of_the_partition_loader_keeps_its_sharding(user_module, manifest):
    data = build_datamodule(run_cfg(module="mydata:Augmented", module_kwargs={"noise": 0.1}), manifest)
    assert data.noise == 0.1 and data.manifest_path == manifest and shards_itself(data)


def test_trace_samples_needs_snakeddps_loader(user_module, manifest):
    cfg = run_cfg(module="mydata:Augmented")
    cfg["trainer"]["trace_samples"] = True
    with pytest.raises(config.ConfigError, match="trace_samples.*HINT: set trace_samples: false"):
        build_datamodule(cfg, manifest)
    cfg["trainer"]["trace_samples"] = False
    assert type(build_datamodule(cfg, manifest)).__name__ == "Augmented"


def test_bad_module_names_the_key(manifest):
    with pytest.raises(config.ConfigError, match="data.module='nowhere:Data': cannot import module 'nowhere'"):
        build_datamodule(run_cfg(module="nowhere:Data"), manifest)


TENSOR_MODULE = """
import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class Blobs(pl.LightningDataModule):
    \"\"\"Two Gaussian blobs made in memory: data that never becomes partition files.\"\"\"

    task = {"num_features": 4, "num_classes": 1}

    def __init__(self, batch_size, seed, samples=96):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        labels = (torch.rand(samples, 1, generator=generator) > 0.5).float()
        features = torch.randn(samples, 4, generator=generator) + 2 * labels
        self.train, self.val = TensorDataset(features, labels), TensorDataset(features[:32], labels[:32])
        self.batch_size = batch_size

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val, batch_size=self.batch_size)
"""


@pytest.mark.e2e
def test_a_module_dataset_trains_on_two_ranks_each_sample_once(tmp_path):
    from snakeddp.run.runfile import RunFile
    from tests.helpers import launch, prepare

    (tmp_path / "blobs.py").write_text(textwrap.dedent(TENSOR_MODULE))
    overrides = {
        "data": {"name": "blobs", "source": "module", "module": "blobs:Blobs"},
        "launch": {"devices": 2},
        "trainer": {"max_epochs": 2, "batch_size": 8, "early_stopping": {"enabled": False}},
    }
    run_yaml, _, run_dir = prepare(tmp_path, overrides)
    record_path = tmp_path / "module.json"
    write_module_record(
        record_path, config.dataset_id(RunFile.load(run_yaml).config["data"]), {"module": "blobs:Blobs"}
    )
    done = launch(run_yaml, record_path, run_dir, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((run_dir / "provenance.json").read_text())
    assert record["data"]["partitions"] is None and record["data"]["dataset"].startswith("blobs-")
    assert [u["target"] for u in record["user_code"]] == ["blobs:Blobs"]
    rows = (run_dir / "metrics.csv").read_text().splitlines()[1:]
    assert [int(row.split(",")[2]) for row in rows] == [96, 96], "DistributedSampler: each sample on one rank"
