"""The data rules for tables and module datasets: one ingestion pass, the same manifest contract."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest

from snakeddp import config
from snakeddp.data.identity import fingerprint
from snakeddp.util import handoff
from tests.helpers import subprocess_env


def write_table(path, seed=0, rows=400, pad=0):
    """``pad``: characters of a column no feature names, in every row."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"a": rng.standard_normal(rows), "b": rng.standard_normal(rows)})
    frame["y"] = (frame["a"] > 0).astype(int)
    if pad:
        frame["pad"] = "x" * pad
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)


def table_config(tiny_config, partitions=3):
    tiny_config["data"] = {
        "name": "tbl",
        "source": "table",
        "num_train_files": partitions,
        "table": {"path": "data/t.csv", "features": ["a", "b"], "label": "y"},
    }
    return tiny_config


def dataset_dirs(workflow, *args):
    done = workflow.run("--dry-run", *args)
    text = done.stdout + done.stderr
    return sorted({word.split("/")[2] for word in text.split() if word.startswith("results/data/tbl-")})


@pytest.mark.e2e
def test_a_table_is_ingested_into_its_final_files_in_one_job(workflow, tiny_config):
    write_table(workflow.directory / "data" / "t.csv")
    workflow.write_config(table_config(tiny_config, partitions=3))
    jobs = workflow.planned_jobs()
    assert {k: jobs.get(k) for k in ("data_table", "data_partition", "data_val", "data_manifest")} == {
        "data_table": 1,
        "data_partition": None,
        "data_val": None,
        "data_manifest": 1,
    }


def dataset_files(folder) -> dict[str, bytes]:
    """A dataset folder's files by name, hidden ones (hand-over stamps, Snakemake's timestamp) left out."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


@pytest.mark.e2e
def test_a_table_s_files_are_its_ingestion_s_and_a_damaged_one_is_made_again_as_hinted(workflow, tiny_config):
    """One data_table job writes the final files (no placing job, no ingest folder left); a touched table reruns
    nothing; a partition damaged after it was written stops training with a HINT which, done literally, ingests
    the table again, byte-identical, and the run completes."""
    table = workflow.directory / "data" / "t.csv"
    # Over the 1 MB up to which Snakemake keeps an input's checksum (a touched small file is not "updated").
    write_table(table, pad=3_000)
    assert table.stat().st_size > 1_000_000
    workflow.write_config(table_config(tiny_config, partitions=3))
    (dataset,) = dataset_dirs(workflow)
    folder = workflow.directory / "results" / "data" / dataset
    manifest = f"results/data/{dataset}/manifest-3.json"
    done = workflow.run(manifest)
    assert "data_partition" not in done.stdout + done.stderr and "data_val" not in done.stdout + done.stderr
    files = dataset_files(folder)
    parts = [f"train/part-{i:05d}.{kind}" for i in range(3) for kind in ("json", "safetensors")]
    assert sorted(files) == sorted(["ingest.json", "manifest-3.json", "val.json", "val.safetensors", *parts])
    # Handed over as ingestion hashed them: training on this machine does not hash them again.
    assert all((folder / name).with_name(f".{Path(name).name}.handed").is_file() for name in parts[1::2])

    os.utime(table)  # newer than every output now: it is its content that names the dataset
    assert workflow.planned_jobs(manifest) == {}

    damaged = folder / "train" / "part-00001.safetensors"
    damaged.write_bytes(files["train/part-00001.safetensors"][:-1] + b"\x00")
    failed = workflow.run("results/runs/base/provenance.json", check=False)
    assert failed.returncode != 0
    log = (workflow.directory / "logs" / "train" / "base.log").read_text()
    (line,) = [text for text in log.splitlines() if "part-00001.safetensors" in text and "HINT:" in text]
    summary = f"results/data/{dataset}/ingest.json"
    hint = f"HINT: delete {summary} and rerun snakemake with it as a target beside all, with your --configfile"
    assert hint in line and f"(snakemake --profile local all {summary})" in line

    (workflow.directory / summary).unlink()
    workflow.run("all", summary)
    assert dataset_files(folder) == files
    assert (workflow.directory / "results" / "runs" / "base" / "provenance.json").is_file()

    # snakeddp verify's HINT for a table's data file, done literally: its ingest.json deleted and asked for.
    (folder / "val.safetensors").write_bytes(files["val.safetensors"][:-1] + b"\x00")
    verify = [str(workflow.bin / "snakeddp"), "verify", "base", "--results", str(workflow.directory / "results")]
    failed = subprocess.run(verify, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert failed.returncode == 1
    assert (
        "a table's data files are its ingestion's: delete its summary and ask Snakemake for it, which ingests it "
        f"again: rm {summary} && snakemake --profile local {summary}."
    ) in failed.stdout, failed.stdout
    (workflow.directory / summary).unlink()
    workflow.run(summary)
    assert dataset_files(folder) == files
    assert subprocess.run(verify, env=subprocess_env(), capture_output=True, text=True, timeout=300).returncode == 0

    # snakeddp prune --data names a table's datasets as the workflow does (the table's checksum is in the name): the
    # table changed, its new dataset is kept while the config plans it, and goes once the table is back.
    write_table(table, seed=1, pad=3_000)
    (changed,) = dataset_dirs(workflow)
    workflow.run(f"results/data/{changed}/manifest-3.json")
    prune = [str(workflow.bin / "snakeddp"), "prune", "--data", "--configfile", str(workflow.configfile)]
    prune += ["--results", str(workflow.directory / "results")]
    kept = subprocess.run(prune, env=subprocess_env(), capture_output=True, text=True, timeout=300, check=True)
    assert kept.stdout.startswith("freed 0 B in 0 dataset(s); kept 2"), kept.stdout + kept.stderr
    write_table(table, pad=3_000)
    freed = subprocess.run(prune, env=subprocess_env(), capture_output=True, text=True, timeout=300, check=True)
    assert freed.stdout.startswith(f"{changed}: removed "), freed.stdout + freed.stderr
    assert folder.is_dir() and not (workflow.directory / "results" / "data" / changed).exists()


@pytest.mark.e2e
def test_a_failed_ingestion_leaves_no_file_of_the_dataset(workflow, tiny_config):
    """A bad value in the table's last row stops data_table after it wrote its files' beginnings: Snakemake
    removes its outputs, so no partition, entry or manifest is left to be taken as complete, and the next
    invocation ingests again."""
    table = workflow.directory / "data" / "t.csv"
    write_table(table)
    with table.open("a") as handle:
        handle.write("0.5,0.5,7\n")  # label 7, where data.num_classes is 2
    workflow.write_config(table_config(tiny_config))
    (dataset,) = dataset_dirs(workflow)
    failed = workflow.run(f"results/data/{dataset}/manifest-3.json", check=False)
    assert failed.returncode != 0
    log = f"logs/data/{dataset}/ingest.log"
    assert "label 7 is not" in (workflow.directory / log).read_text()
    # The terminal: the step's one line with its HINT, once, under where its log is; the job's command once (its
    # parameters a file's name, not the table's JSON: every feature named), no RuleException repeating it.
    said = failed.stdout + failed.stderr
    [line] = [line for line in said.splitlines() if "label 7 is not" in line]
    assert line.startswith("snakeddp.steps: ") and "HINT: " in line, said
    assert f"Logfile {log}, its last line" in said and said.count("python -m snakeddp.steps ingest") == 1, said
    assert '"features"' not in said and "RuleException" not in said, said
    folder = workflow.directory / "results" / "data" / dataset
    # Only the failure's record, for a run training beside it (data.stream), which names no data file.
    left = sorted(path.name for path in folder.rglob("*")) if folder.exists() else []
    assert left == [".ingest-failed.json"], left
    assert workflow.planned_jobs(f"results/data/{dataset}/manifest-3.json").get("data_table") == 1


@pytest.mark.e2e
def test_a_changed_table_is_a_new_dataset(workflow, tiny_config):
    table = workflow.directory / "data" / "t.csv"
    write_table(table, seed=0)
    workflow.write_config(table_config(tiny_config))
    before = dataset_dirs(workflow)
    write_table(table, seed=1)
    after = dataset_dirs(workflow)
    assert len(before) == len(after) == 1 and before != after
    data = config.validate(table_config(tiny_config))["data"]
    data["table"]["sha256"] = fingerprint(table)
    assert after == [config.dataset_id(data)]


@pytest.mark.e2e
def test_a_missing_table_stops_the_workflow_with_its_path(workflow, tiny_config):
    workflow.write_config(table_config(tiny_config))
    done = workflow.run("--dry-run", check=False)
    assert done.returncode != 0 and "data.table.path='data/t.csv': no such file or folder" in done.stdout + done.stderr


@pytest.mark.e2e
def test_a_module_dataset_writes_no_partitions(workflow, tiny_config):
    tiny_config["data"] = {"name": "imgs", "source": "module", "module": "mydata:Images"}
    workflow.write_config(tiny_config)
    # The workflow imports data.module before planning (preflight): it must exist where snakemake runs.
    (workflow.directory / "mydata.py").write_text(
        "import lightning.pytorch as pl\n\n\nclass Images(pl.LightningDataModule):\n    pass\n"
    )
    jobs = workflow.planned_jobs()
    assert jobs.get("data_module") == 1 and "data_partition" not in jobs and "data_table" not in jobs


@pytest.mark.e2e
def test_a_table_split_by_windows_gives_the_same_partitions_and_weights_twice(tmp_path, tiny_config):
    """`snakemake --profile local` on a Parquet table of more rows than one window (2^18), in two working
    directories, the second's first invocation killed (every process at once) while data_table writes: the
    partitions and manifest are byte-identical, and so are the trained weights."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    from tests.helpers import Workflow

    rows = 300_000
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(rows, dtype=np.float32), rng.standard_normal(rows, dtype=np.float32)
    config = table_config(tiny_config)
    config["data"]["table"]["path"] = "data/t.parquet"
    config["trainer"] = {"max_epochs": 2, "batch_size": 4096}
    seen = []
    for name in ("first", "second"):
        flow = Workflow(tmp_path / name)
        (flow.directory / "data").mkdir(parents=True)
        table = pa.table({"a": a, "b": b, "y": (a > 0).astype(np.int64)})
        pq.write_table(table, flow.directory / "data" / "t.parquet", row_group_size=2_000)
        flow.write_config(config)
        if name == "second":
            killed_while_ingesting(flow)
            flow.run("--unlock")
        flow.run()
        (log,) = flow.directory.glob("logs/data/*/ingest.log")
        assert "ingest: window 1 of 1 (300,000 rows in 150 row groups" in log.read_text()
        (data,) = flow.directory.glob("results/data/tbl-*")
        files = {
            p.relative_to(data).as_posix(): p.read_bytes()
            for p in sorted(data.rglob("*"))
            if p.is_file() and not p.name.startswith(".")
        }
        (checkpoint,) = flow.directory.glob("results/runs/*/checkpoints/last.ckpt")
        seen.append((files, torch.load(checkpoint, weights_only=True)["state_dict"]))
    # The table touched, not changed (over Snakemake's 1 MB checksum limit): neither its ingestion nor its stream
    # manifest, on which the run trained, is made again.
    assert (flow.directory / "data" / "t.parquet").stat().st_size > 1_000_000
    os.utime(flow.directory / "data" / "t.parquet")
    assert flow.planned_jobs() == {}
    (first, first_weights), (second, second_weights) = seen
    assert "manifest-3.json" in first and first == second
    assert first_weights.keys() == second_weights.keys()
    assert all(torch.equal(first_weights[k], second_weights[k]) for k in first_weights)


def killed_while_ingesting(flow) -> None:
    """``snakemake`` in ``flow`` until its data_table job has begun writing the dataset's train/, then every process
    of it stopped and killed at once, as a lost node leaves it: its partial outputs are no complete dataset, and
    the next invocation ingests again (the profile's rerun-incomplete)."""
    # Its own warm process, not a kept one: what descends from this Snakemake is everything that runs the job.
    env = {k: v for k, v in subprocess_env().items() if k != handoff.SOCKET}
    snakemake = subprocess.Popen(
        flow.command(), cwd=flow.directory, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while not list(flow.directory.glob("results/data/*/train/.part-*.partial")):
        assert snakemake.poll() is None and time.monotonic() < deadline, "snakemake ended before it ingested"
        time.sleep(0.01)
    processes = [psutil.Process(snakemake.pid), *psutil.Process(snakemake.pid).children(recursive=True)]
    for action in (psutil.Process.suspend, psutil.Process.kill):
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                action(process)
    snakemake.wait()
    (folder,) = flow.directory.glob("results/data/*")
    assert not (folder / "ingest.json").exists() and not list(folder.glob("manifest-*.json"))
    assert flow.planned_jobs().get("data_table") == 1
