"""snakeddp.provenance.record.build: the whole record from what the attempt started from and what fit produced."""

from __future__ import annotations

import hashlib

import pytest

from snakeddp import config as configuration
from snakeddp.cluster import Layout
from snakeddp.data.custom import describe
from snakeddp.environment.capture import nvidia_driver
from snakeddp.provenance import record as provenance
from snakeddp.provenance.schema import ProvenanceError, validate
from snakeddp.run.layout import RunPaths
from snakeddp.run.runfile import RunFile
from snakeddp.util.fsutil import read_json
from snakeddp.util.hashing import sha256_file
from tests.helpers import TINY, merged, write_dataset

PHASES = ("startup_s", "train_loop_s", "validation_s", "checkpoint_s", "teardown_s", "total_s", "imports_s")
PHASES += ("checks_s", "trainer_build_s", "fit_setup_s")
RANKS = [
    {"rank": r, "local_rank": r, "node_rank": 0, "host": "node1", "node": None, "pid": 100 + r, "device": "cpu"}
    for r in range(2)
]


def _row(epoch: int, val_loss: float | str) -> dict[str, str]:
    return {
        "epoch": str(epoch),
        "partition": str(epoch % 3),
        "samples": "300",
        "train_loss": "0.7",
        "val_loss": str(val_loss),
        "val_acc": "0.5" if val_loss != "" else "",
        "train_seconds": "1.5",
    }


def _attempt(tmp_path, locked: bool = True) -> provenance.Attempt:
    cfg = configuration.validate(merged(TINY, {"launch": {"accelerator": "cpu", "devices": 2}}))
    manifest = write_dataset(tmp_path / "data", cfg["data"])
    paths = RunPaths(tmp_path / "runs" / "base")
    paths.checkpoints.mkdir(parents=True)
    for name in ("epoch001-val_loss0.6000.ckpt", "last.ckpt"):
        (paths.checkpoints / name).write_bytes(name.encode())
    return provenance.Attempt(
        run=RunFile(run_id="base", config=configuration.run_config(cfg)),
        run_dir=paths.folder,
        manifest=manifest,
        manifest_sha256=sha256_file(manifest),
        environment_record=None,
        key="0123456789ab" + "0" * 52,
        resume_from=paths.last_checkpoint,
        locked=locked,
        resumed_record=provenance.file_record(paths.last_checkpoint, paths.folder),
    )


def _outcome(attempt: provenance.Attempt, calls: list[str]) -> provenance.Outcome:
    checkpoints = RunPaths(attempt.run_dir).checkpoints

    def phases() -> dict[str, float]:
        calls.append("phases")
        return dict.fromkeys(PHASES, 0.5)

    return provenance.Outcome(
        started_at="2026-01-01T00:00:00+00:00",
        seconds=3.21,
        world_size=2,
        metrics=[_row(0, 0.7), _row(1, 0.6), _row(2, "")],
        best_checkpoint=str(checkpoints / "epoch001-val_loss0.6000.ckpt"),
        best_score=0.6,
        last_checkpoint=str(checkpoints / "last.ckpt"),
        stopped_early=False,
        ranks=RANKS,
        phases=phases,
    )


LAYOUT = Layout(
    launcher="direct",
    rank=0,
    local_rank=0,
    world_size=2,
    local_world_size=2,
    node_rank=0,
    num_nodes=1,
    master_addr="127.0.0.1",
    master_port=29500,
)


def test_record_from_the_attempt_and_the_outcome(tmp_path):
    attempt, calls = _attempt(tmp_path), []
    data = describe(object(), attempt.manifest, attempt.manifest_sha256)
    (attempt.run_dir / "checkpoints" / "last.ckpt").write_bytes(b"the fit's own last checkpoint")
    record = provenance.build(attempt, LAYOUT, _outcome(attempt, calls), data=data, user_code=[], tracking=None)

    assert record["run_id"] == "base" and record["status"] == "completed"
    assert record["data"] == {**data, "counted": None}, "rows without batch counts: nothing counted"
    assert record["origin_sha256"] == attempt.key
    assert {key: record["attempt"][key] for key in ("id", "restored")} == {"id": "0123456789ab", "restored": False}
    (this_try,) = record["attempt"]["tries"]  # the try that completes now; its launcher adds it to tries.json
    assert (this_try["number"], this_try["outcome"], this_try["hang"]) == (1, "completed", None)
    assert record["timing"]["goodput"]["tries"] == 1 and record["timing"]["goodput"]["lost"] == {}
    assert record["launch"]["accelerator"] == "cpu" and record["launch"]["backend"] == "gloo"
    assert record["launch"]["world_size"] == 2 and record["launch"]["hosts"] == ["node1"]
    training = record["training"]
    assert training["epochs_completed"] == 3 and training["partitions_per_epoch"] == [0, 1, 2]
    assert training["best_val_loss"] == 0.6 and training["best_epoch"] == 1 and training["best_val_acc"] == 0.5
    assert training["best_checkpoint"]["path"] == "checkpoints/epoch001-val_loss0.6000.ckpt"
    assert training["best_checkpoint"]["score"] == 0.6 and training["best_checkpoint"]["metric"] == "val_loss"
    assert training["monitor"] == {"metric": "val_loss", "mode": "min"} and training["best_score"] == 0.6
    assert training["resumed_from"] == {
        "path": "checkpoints/last.ckpt",
        "sha256": hashlib.sha256(b"last.ckpt").hexdigest(),
        "bytes": len(b"last.ckpt"),
    }, "as it was read: the fit overwrote it since"
    assert [c["path"] for c in training["checkpoints"]] == [
        "checkpoints/epoch001-val_loss0.6000.ckpt",
        "checkpoints/last.ckpt",
    ]
    assert record["timing"]["train_seconds"] == 4.5 and record["timing"]["samples_trained"] == 900
    assert record["timing"]["phases"] == dict.fromkeys(PHASES, 0.5) and calls == ["phases"]
    assert "warnings" not in record
    validate(read_json(provenance.write(attempt.run_dir, record)))


def test_the_record_names_the_driver_and_each_gpus_compute_capability(tmp_path):
    attempt = _attempt(tmp_path)
    data = describe(object(), attempt.manifest, attempt.manifest_sha256)
    built = provenance.build(attempt, LAYOUT, _outcome(attempt, []), data=data, user_code=[], tracking=None)
    record = read_json(provenance.write(attempt.run_dir, built))
    environment = record["environment"]
    assert environment["nvidia_driver"] == nvidia_driver(), "this machine's, read from /proc"
    assert environment["gpu_capabilities"] == [] and environment["gpus"] == []
    validate(record)
    older = {
        **record,
        "environment": {k: v for k, v in environment.items() if k not in ("nvidia_driver", "gpu_capabilities")},
    }
    validate(older)  # records written before these were recorded stay valid
    named = {**record, "environment": {**environment, "gpus": ["Tesla V100"], "gpu_capabilities": ["sm_70"]}}
    with pytest.raises(ProvenanceError, match="gpu_capabilities"):
        validate(named)
    validate({**named, "environment": {**named["environment"], "gpu_capabilities": ["7.0"]}})


@pytest.mark.parametrize("stopped_early", [False, True])
def test_status_and_the_no_lock_warning(tmp_path, stopped_early):
    attempt = _attempt(tmp_path, locked=False)
    outcome = _outcome(attempt, [])
    outcome = provenance.Outcome(**{**outcome.__dict__, "stopped_early": stopped_early})
    record = provenance.build(attempt, LAYOUT, outcome, data={}, user_code=[], tracking=None)
    assert record["status"] == ("early_stopped" if stopped_early else "completed")
    assert record["training"]["stopped_early"] is stopped_early
    assert len(record["warnings"]) == 1 and "flock" in record["warnings"][0]


def test_rank_start_summarises_how_every_rank_started():
    from snakeddp.provenance.record import rank_start

    assert rank_start([{"start": "warm"}, {"start": "warm"}]) == "warm"
    assert rank_start([{"start": "warm"}, {"start": "cold"}]) == "mixed"
    assert rank_start([{"rank": 0}]) == "cold"  # gathered before ranks said how they started
