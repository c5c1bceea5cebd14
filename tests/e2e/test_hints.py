"""Every HINT that tells the user to do something, done literally, gives what it promises."""

import contextlib
import csv
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from snakeddp import config
from snakeddp.provenance.schema import ProvenanceError, validate_file
from snakeddp.run import tries
from snakeddp.run.attempt import hold_attempt_lock
from snakeddp.util import handoff
from tests.helpers import TINY, Workflow, assert_valid_provenance, copy_of, subprocess_env, tiny_with
from tests.training_runs import SIGNALLED_RECORDS, Run, slow_config

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kept_warm")]

RUN = "results/runs/base"


def hint_line(text: str, what: str) -> str:
    """The error line that names ``what`` and carries a HINT."""
    lines = [line for line in text.splitlines() if what in line and "HINT:" in line]
    assert lines, text[-3000:]
    return lines[-1]


def flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0x01])


def drop_a_checksum(data: bytes) -> bytes:
    manifest = json.loads(data)
    del manifest["train"][1]["blake3"]
    return json.dumps(manifest).encode()


def point_outside(file: str, entry: str):
    """A manifest whose entry names a file outside the dataset's directory (checksums left as they were)."""

    def damage(data: bytes) -> bytes:
        manifest = json.loads(data)
        if entry == "val":
            manifest["val"]["file"] = file
        else:
            manifest["train"][int(entry)]["file"] = file
        return json.dumps(manifest).encode()

    return damage


OUTSIDE = "which is not a file inside the dataset's directory"


def dataset_of(flow: Workflow) -> Path:
    """TINY's dataset directory under ``flow``'s results."""
    return flow.directory / "results/data" / config.dataset_id(config.validate(TINY)["data"])


@pytest.fixture(scope="module")
def data_only(tmp_path_factory) -> Workflow:
    """Everything of TINY's pipeline but training and the report (its dataset, run.yaml, the three stages'
    environment records), built once by one `snakemake` with those targets: each damaged-file case starts
    from a copy of it."""
    flow = Workflow(tmp_path_factory.mktemp("data-only"))
    flow.write_config(TINY)
    records = [f"results/envs/{stage}.json" for stage in ("data", "train", "report")]
    flow.run(str(dataset_of(flow).relative_to(flow.directory) / "manifest-3.json"), f"{RUN}/run.yaml", *records)
    assert not (flow.directory / RUN / "provenance.json").exists()
    return flow


@pytest.mark.parametrize(
    ("name", "damage", "error", "hint"),
    [
        ("train/part-00002.safetensors", flip_last_byte, "blake3 checksum mismatch", "delete the file"),
        ("val.safetensors", flip_last_byte, "blake3 checksum mismatch", "delete the file"),
        ("manifest-3.json", drop_a_checksum, "manifest entry train[1] lacks blake3 or sha256", "delete the manifest"),
        ("manifest-3.json", point_outside("../../../config.yaml", "0"), OUTSIDE, "delete the manifest"),
        ("manifest-3.json", point_outside("/etc/hostname", "val"), OUTSIDE, "delete the manifest"),
    ],
)
def test_a_damaged_data_file_or_manifest_deleted_as_hinted_is_rewritten_identically_and_training_completes(
    data_only: Workflow, tmp_path, name, damage, error, hint
):
    workflow = copy_of(data_only, tmp_path / "copy")
    target = dataset_of(workflow) / name
    original = target.read_bytes()
    target.write_bytes(damage(original))

    failed = workflow.run(f"{RUN}/provenance.json", check=False)
    assert failed.returncode != 0
    log = (workflow.directory / "logs/train/base.log").read_text()
    line = hint_line(log, name)
    assert error in line and log.count(error) == 1, log[-3000:]
    relative = target.relative_to(workflow.directory)
    assert f"HINT: {hint} and rerun snakemake with its path as a target beside all, with your --configfile" in line
    assert f"(snakemake --profile local all {relative})" in line, "the profile: cores are not given without one"

    target.unlink()
    workflow.run("all", str(relative))
    assert target.read_bytes() == original
    assert (workflow.directory / RUN / "provenance.json").is_file()


def descendants_and_self(pid: int) -> list[psutil.Process]:
    parent = psutil.Process(pid)
    return [parent, *parent.children(recursive=True)]


def training_in_background(workflow: Workflow, epochs: int) -> subprocess.Popen:
    """``snakemake`` for the run's provenance.json, in the background, returned once ``epochs``
    epochs are in its metrics.csv (the run still training)."""
    metrics = workflow.directory / RUN / "metrics.csv"
    # Its own warm process, not the file's kept one: the tests kill or stop this Snakemake and what descends
    # from it, its jobs included.
    env = {k: v for k, v in subprocess_env().items() if k != handoff.SOCKET}
    snakemake = subprocess.Popen(
        workflow.command(f"{RUN}/provenance.json"), cwd=workflow.directory, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 600
    while not metrics.exists() or len(metrics.read_text().splitlines()) < 1 + epochs:  # the header first
        assert snakemake.poll() is None and time.monotonic() < deadline, f"training ended before epoch {epochs}"
        time.sleep(0.1)
    return snakemake


def kill_everything(snakemake: subprocess.Popen) -> None:
    """A lost node: nothing gets to clean up. Every process is stopped before any is killed: killed one
    by one, the first deaths woke the rest (the warm process ends its jobs when Snakemake dies), and a
    process could be gone before its turn."""
    processes = descendants_and_self(snakemake.pid)
    for action in (psutil.Process.suspend, psutil.Process.kill):
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                action(process)
    snakemake.wait()


# Epochs long enough that the run is still training when it is killed after its second.
KILLED = tiny_with(
    {"data": {"num_records_per_train_file": 3000}, "trainer": {"max_epochs": 4, "early_stopping": {"enabled": False}}}
)


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Workflow:
    """A pipeline whose every process was killed at once as its second epoch ended, as a lost node leaves it
    (Snakemake's lock and incomplete marks, the checkpoints saved whole by then: ``resumed_from``), made once: each
    test that unlocks and reruns it starts from a copy."""
    flow = Workflow(tmp_path_factory.mktemp("killed"))
    flow.write_config(KILLED)
    kill_everything(training_in_background(flow, epochs=2))
    assert not (flow.directory / RUN / "provenance.json").exists()
    return flow


def resumed_from(workflow: Workflow) -> Path:
    """The checkpoint the killed run's rerun resumes from: the newest saved whole. The kill comes as the second
    epoch's metrics row appears, just before its checkpoints: last.ckpt, of the first epoch or of the second, or
    the second's top-k checkpoint where the kill fell between the two saves."""
    newest = tries.newest_checkpoint(workflow.directory / RUN)
    assert newest is not None
    return newest


def test_after_a_hard_kill_snakemake_unlock_then_rerun_resumes_and_completes(killed: Workflow, tmp_path):
    workflow = copy_of(killed, tmp_path / "copy")
    metrics = workflow.directory / RUN / "metrics.csv"

    locked = workflow.run(f"{RUN}/provenance.json", check=False)
    assert locked.returncode != 0 and "--unlock" in locked.stdout + locked.stderr
    workflow.run("--unlock")
    workflow.run(f"{RUN}/provenance.json")
    assert "resuming from" in (workflow.directory / "logs/train/base.log").read_text()
    with metrics.open() as handle:
        assert [int(row["epoch"]) for row in csv.DictReader(handle)] == list(range(4))


def test_a_second_attempt_is_refused_until_the_one_fuser_names_is_stopped(tmp_path):
    run = Run(tmp_path, slow_config(SIGNALLED_RECORDS, max_epochs=3))
    first = run.start()
    run.wait_for_epochs(first, 1)
    second = subprocess.run(run.argv(), env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert second.returncode != 0
    line = hint_line(second.stdout + second.stderr, "still training")
    command = re.search(r"find it with `(fuser [^`]+)` and stop it", line).group(1)

    found = subprocess.run(shlex.split(command), capture_output=True, text=True, check=True)
    pids = [int(pid) for pid in found.stdout.split()]
    assert pids
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    # fuser names the ranks (they hold the lock); stopped by TERM they save last.ckpt as on preemption.
    assert first.wait(timeout=300) != 0
    assert "preempted in epoch" in run.log.read_text()

    assert run.train() == 0, run.log.read_text()[-3000:]
    assert "resuming from" in run.log.read_text()
    assert [int(r["epoch"]) for r in run.metrics()] == [0, 1, 2]


def train_directly(run: Run) -> subprocess.CompletedProcess:
    """``python -m snakeddp.train`` by hand, as its docstring shows (one process, no launcher)."""
    argv = [run.argv()[0], "-m", "snakeddp.train", *run.argv()[5:]]
    return subprocess.run(argv, env=subprocess_env(), capture_output=True, text=True, timeout=300)


def test_checkpoints_of_unknown_origin_moved_away_as_hinted_let_the_run_start_fresh(tmp_path):
    run = Run(tmp_path, {"trainer": {"max_epochs": 1}})
    checkpoints = run.dir / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / "last.ckpt").write_bytes(b"from somewhere else")
    refused = train_directly(run)
    assert refused.returncode != 0
    assert "HINT: move the checkpoints away to start fresh" in hint_line(refused.stderr, "last.ckpt")

    checkpoints.rename(tmp_path / "kept-checkpoints")
    done = train_directly(run)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (run.dir / "provenance.json").is_file() and (tmp_path / "kept-checkpoints/last.ckpt").is_file()


def test_an_attempt_of_another_config_is_moved_to_attempts_by_the_launcher_as_hinted(tmp_path):
    run = Run(tmp_path, {"trainer": {"max_epochs": 1}})
    # The key of another config: a sha256 like any attempt key (run-state.json is schema-checked).
    (run.dir / "run-state.json").write_text(json.dumps({"resume_key": hashlib.sha256(b"another config").hexdigest()}))
    (run.dir / "checkpoints").mkdir()
    (run.dir / "checkpoints" / "last.ckpt").write_bytes(b"another config's weights")
    refused = train_directly(run)
    assert refused.returncode != 0
    line = hint_line(refused.stderr, "different config, data or environment")
    assert "HINT: start runs with `python -m snakeddp.launch` (it moves old attempts to attempts/)" in line

    assert run.train(kept_warm=True) == 0, run.log.read_text()[-3000:]
    (old,) = (run.dir / "attempts").iterdir()
    assert (old / "checkpoints" / "last.ckpt").read_bytes() == b"another config's weights"
    assert (run.dir / "provenance.json").is_file()


def snakeddp_verify(flow: Workflow) -> subprocess.CompletedProcess:
    argv = [str(flow.bin / "snakeddp"), "verify", "base", "--results", str(flow.directory / "results")]
    return subprocess.run(argv, env=subprocess_env(), capture_output=True, text=True, timeout=300)


def hinted_snakemake(line: str) -> list[str]:
    """The arguments of the `snakemake --profile local ...` a HINT names (up to its comma or parenthesis), as the
    test's workflow takes them (its own profile, config file and directory)."""
    found = re.search(r"snakemake --profile local ([^,()]+?)(?:,| \(|\.$|$)", line.partition("HINT: ")[2])
    assert found, line
    return shlex.split(found.group(1))


def test_verify_failures_fixed_as_hinted_verify_again(data_only: Workflow, tmp_path):
    """Each kind of file verify finds changed, fixed with the command its HINT names (a damaged checkpoint's "move
    the run directory away and rerun snakemake" was "Nothing to be done": the report was up to date)."""
    workflow = copy_of(data_only, tmp_path / "copy")
    workflow.write_config(tiny_with({"trainer": {"max_epochs": 2}}))
    workflow.run(f"{RUN}/provenance.json")
    assert snakeddp_verify(workflow).returncode == 0
    dataset = dataset_of(workflow)

    # A damaged partition: delete it and ask Snakemake for exactly that file.
    part = dataset / "train/part-00001.safetensors"
    original = part.read_bytes()
    part.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    failed = snakeddp_verify(workflow)
    assert failed.returncode == 1
    line = hint_line(failed.stdout, "checks failed")
    relative = part.relative_to(workflow.directory).as_posix()
    assert (
        f"delete a mismatched data file or manifest and ask Snakemake for it, which writes it again: rm {relative} "
        f"&& snakemake --profile local {relative}." in line
    ), line
    assert "checkpoint" not in line and "provenance.json" not in line, "only what to do for the kind that failed"
    part.unlink()
    workflow.run(*hinted_snakemake(line))
    assert part.read_bytes() == original
    assert snakeddp_verify(workflow).returncode == 0

    # A damaged checkpoint: its train job, forced, trains the run again and keeps the damaged attempt.
    first = json.loads((workflow.directory / RUN / "provenance.json").read_text())
    best = workflow.directory / RUN / first["training"]["best_checkpoint"]["path"]
    damaged = best.read_bytes()[:-1]
    best.write_bytes(damaged)
    failed = snakeddp_verify(workflow)
    assert failed.returncode == 1
    line = hint_line(failed.stdout, "checks failed")
    forcing = f"snakemake --profile local --forcerun {RUN}/provenance.json, with your --configfile"
    assert f"never load a mismatched checkpoint; train the run again with {forcing}" in line, line
    exported = subprocess.run(
        [str(workflow.bin / "snakeddp"), "export", "base"], cwd=workflow.directory, env=subprocess_env(),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (refused,) = exported.stderr.splitlines()
    assert exported.returncode == 2 and f"HINT: train it again with {forcing}" in refused, refused
    assert hinted_snakemake(line) == hinted_snakemake(refused) == ["--forcerun", f"{RUN}/provenance.json"]
    done = workflow.run(*hinted_snakemake(line))
    assert "not restored; its record stays, as base@" in done.stdout + done.stderr
    assert snakeddp_verify(workflow).returncode == 0
    (kept,) = (workflow.directory / RUN / "attempts").iterdir()
    assert (
        kept.name == f"{first['attempt']['id']}-damaged"
        and (kept / best.relative_to(best.parents[1])).read_bytes() == damaged
    )
    assert json.loads((kept / "provenance.json").read_text())["timing"] == first["timing"], "its record is kept"
    assert subprocess.run(
        [str(workflow.bin / "snakeddp"), "export", "base"], cwd=workflow.directory, env=subprocess_env(),
        capture_output=True, text=True, timeout=300,
    ).returncode == 0  # fmt: skip

    # A provenance.json edited by hand: force its train job, which resumes at the end and rewrites it.
    record = workflow.directory / RUN / "provenance.json"
    edited = json.loads(record.read_text())
    del edited["training"]
    record.write_text(json.dumps(edited))
    with pytest.raises(
        ProvenanceError, match=f"HINT: .* snakemake --profile local --forcerun {record}, with your --configfile"
    ):
        validate_file(record)
    line = hint_line(snakeddp_verify(workflow).stdout, "checks failed")
    assert f"a provenance.json that fails its schema is written again by its train job: {forcing}" in line, line
    workflow.run(*hinted_snakemake(line))
    assert validate_file(record)["training"]["epochs_completed"] == 2
    assert snakeddp_verify(workflow).returncode == 0


def test_ranks_started_by_hand_in_another_layout_are_refused_and_the_launcher_as_hinted_trains(tmp_path):
    run = Run(tmp_path, {"trainer": {"max_epochs": 1}})  # launch.devices: 1
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    by_hand = subprocess.run(
        [*torchrun, "-m", "snakeddp.train", *run.argv()[5:]],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert by_hand.returncode != 0
    line = hint_line(by_hand.stdout + by_hand.stderr, "launch.devices=1")
    assert "HINT: start the processes with `python -m snakeddp.launch`" in line
    assert not (run.dir / "provenance.json").exists()

    assert run.train(kept_warm=True) == 0, run.log.read_text()[-3000:]
    assert (run.dir / "provenance.json").is_file()


NET = """
from snakeddp.training.models import MLP


class Net(MLP):
    pass
"""


def written(directory: Path) -> dict[Path, int]:
    """Every file under ``directory`` and its mtime."""
    return {path: path.stat().st_mtime_ns for path in directory.rglob("*")}


def test_a_model_module_put_where_snakemake_runs_as_hinted_is_imported_by_every_rank(data_only: Workflow, tmp_path):
    # TINY's dataset and environment records made: only the run's config and its training are left to run.
    workflow = copy_of(data_only, tmp_path / "copy")
    workflow.write_config(
        tiny_with({"model": {"target": "mynet:Net"}, "trainer": {"max_epochs": 1}, "launch": {"devices": 2}})
    )
    before = written(workflow.directory / "results")
    failed = workflow.run(f"{RUN}/provenance.json", check=False)
    assert failed.returncode != 0
    # Checked before any job runs (workflow.preflight imports it with the training interpreter): run.yaml too as it was.
    assert written(workflow.directory / "results") == before
    line = hint_line(failed.stdout + failed.stderr, "cannot import module 'mynet'")
    assert "put the module in the directory snakemake runs from" in line

    (workflow.directory / "mynet.py").write_text(NET)
    workflow.run(f"{RUN}/provenance.json")
    (record,) = assert_valid_provenance(workflow.directory / "results")
    assert record["user_code"][0]["target"] == "mynet:Net"


def test_a_run_whose_loss_goes_nan_is_recorded_as_diverged_in_one_line_and_the_hinted_lower_rate_trains(
    data_only: Workflow, tmp_path
):
    """Two ranks, one all-reduce an epoch: every rank stops after the first NaN epoch, and the run is recorded (its
    rerun would otherwise resume and fail again on an infinite best score) and reported."""
    workflow = copy_of(data_only, tmp_path / "copy")
    workflow.write_config(tiny_with({"model": {"lr": 1e30}, "launch": {"devices": 2}}))
    done = workflow.run()
    terminal = done.stdout + done.stderr
    line = hint_line(terminal, "the model diverged")
    assert terminal.count("the model diverged") == 1 and "Traceback" not in terminal, terminal[-3000:]
    assert line.startswith("base: val_loss is nan at epoch 1: ") and "HINT: lower the learning rate (model.lr" in line
    (record,) = assert_valid_provenance(workflow.directory / "results")
    assert record["status"] == "diverged" and record["training"]["epochs_completed"] == 1
    assert record["training"]["best_score"] is None and record["training"]["best_checkpoint"] is None
    with (workflow.directory / "results/report/runs.csv").open() as handle:
        assert [row["status"] for row in csv.DictReader(handle)] == ["diverged"]
    again = workflow.run()
    assert "Nothing to be done" in again.stdout + again.stderr, "a diverged run is finished: nothing reruns it"

    # As hinted: a lower learning rate trains the run again from epoch 1; the diverged attempt is kept.
    workflow.write_config(tiny_with({"model": {"lr": 0.003}, "launch": {"devices": 2}}))
    workflow.run()
    (record,) = assert_valid_provenance(workflow.directory / "results")
    assert record["status"] == "completed" and record["training"]["epochs_completed"] == 3
    assert record["training"]["best_score"] > 0 and record["training"]["best_checkpoint"]
    assert list((workflow.directory / RUN / "attempts").iterdir()), "the diverged attempt is kept"


def test_a_last_checkpoint_whose_weights_no_longer_fit_the_model_is_one_line_and_its_hint_trains_again(
    killed: Workflow, tmp_path
):
    """Weights of another shape than the model's code builds now, where the attempt key did not change (a module
    the model imports by name at run time): one line naming the weight, not each rank's size-mismatch traceback
    on every rerun; the checkpoints moved away as hinted, the run trains from its first epoch."""
    import torch

    workflow = copy_of(killed, tmp_path / "copy")
    workflow.run("--unlock")
    last = resumed_from(workflow)
    checkpoint = torch.load(last, weights_only=True)
    name = next(iter(checkpoint["state_dict"]))
    checkpoint["state_dict"][name] = torch.zeros(3, *checkpoint["state_dict"][name].shape[1:])
    torch.save(checkpoint, last)
    failed = workflow.run(f"{RUN}/provenance.json", check=False)
    assert failed.returncode != 0
    log = (workflow.directory / "logs/train/base.log").read_text()
    line = hint_line(log, "do not fit")
    assert log.count("do not fit") == 1 and "Traceback" not in log, log[-3000:]
    assert f"({name} is [3, " in line, line
    command = re.search(r"HINT: .*\((mv [^)]+)\) and rerun", line).group(1)

    subprocess.run(shlex.split(command), check=True, cwd=workflow.directory)
    workflow.run(f"{RUN}/provenance.json")
    assert "training from epoch 1/" in (workflow.directory / "logs/train/base.log").read_text()
    (record,) = assert_valid_provenance(workflow.directory / "results")
    assert record["training"]["epochs_completed"] == record["training"]["max_epochs"]


def test_a_finished_attempt_whose_checkpoint_was_damaged_is_not_continued_and_the_run_trains_from_epoch_1(
    data_only: Workflow, tmp_path
):
    """A higher budget continues the finished attempt from its last.ckpt: one whose bytes are not those its record
    hashed would fail every resume, and deleting the run's copy (the HINT of that failure) copied it in again."""
    workflow = copy_of(data_only, tmp_path / "copy")
    workflow.write_config(tiny_with({"trainer": {"max_epochs": 2}}))
    workflow.run(f"{RUN}/provenance.json")
    last = workflow.directory / RUN / "checkpoints" / "last.ckpt"
    with last.open("r+b") as handle:  # in place, as a disk's fault or a careless tool would
        handle.truncate(1000)

    workflow.write_config(tiny_with({"trainer": {"max_epochs": 3}}))
    done = workflow.run(f"{RUN}/provenance.json")
    log = (workflow.directory / "logs/train/base.log").read_text()
    assert "is not taken over: its checkpoints/last.ckpt differs from the sha256 its record holds" in log, log[-3000:]
    assert "this checkpoint is damaged" not in log + done.stdout + done.stderr
    (record,) = assert_valid_provenance(workflow.directory / "results")
    assert record["training"]["epochs_completed"] == 3 and record["training"]["epochs_from"][0]["first_epoch"] == 1
    assert [
        path.stat().st_size for path in (workflow.directory / RUN / "attempts").glob("*/checkpoints/last.ckpt")
    ] == [1000], "the damaged attempt is kept as it was"


@pytest.mark.parametrize("damage", ["truncated", "crafted"])
def test_a_damaged_or_crafted_last_checkpoint_is_one_line_and_deleting_it_as_hinted_trains_again(
    killed: Workflow, tmp_path, damage
):
    workflow = copy_of(killed, tmp_path / "copy")
    metrics = workflow.directory / RUN / "metrics.csv"
    workflow.run("--unlock")

    last = resumed_from(workflow)
    marker = workflow.directory / "code-ran"
    if damage == "truncated":
        last.write_bytes(last.read_bytes()[:1000])
    else:  # a pickle that would create `marker` when unpickled by a loader that runs code
        payload = f"import os\nos.mkdir({str(marker)!r})"
        last.write_bytes(b"c" + b"builtins\nexec\n" + b"(" + repr(payload).encode() + b"\ntR.")
    failed = workflow.run(f"{RUN}/provenance.json", check=False)
    assert failed.returncode != 0 and not marker.exists()
    log = (workflow.directory / "logs/train/base.log").read_text()
    line = hint_line(log, last.name)
    assert log.count("this checkpoint") == 1 and "Traceback" not in log, log[-3000:]
    assert "weights_only=False" not in log
    command = re.search(r"HINT: delete it \((rm [^)]+)\) and rerun snakemake", line).group(1)

    subprocess.run(shlex.split(command), check=True, cwd=workflow.directory)
    workflow.run(f"{RUN}/provenance.json")
    assert not marker.exists()
    with metrics.open() as handle:
        assert [int(row["epoch"]) for row in csv.DictReader(handle)] == list(range(4))


def test_a_second_invocation_with_nolock_touches_nothing_of_a_training_run_and_its_hint_trains_the_new_config(
    data_only: Workflow, tiny_config, tmp_path
):
    workflow = copy_of(data_only, tmp_path / "copy")  # its environment records made
    tiny_config["data"]["num_records_per_train_file"] = 3000
    tiny_config["trainer"].update(max_epochs=3, early_stopping={"enabled": False})
    workflow.write_config(tiny_config)
    first = training_in_background(workflow, epochs=1)
    # Held, not raced: the first invocation is stopped mid-training (its ranks keep the attempt lock).
    held = descendants_and_self(first.pid)
    for process in held:
        process.suspend()
    run_dir, log = workflow.directory / RUN, workflow.directory / "logs/train/base.log"
    files = (run_dir / "run.yaml", log, workflow.directory / "logs/train/base.config.log")
    before = {path: (path.stat().st_ino, path.stat().st_mtime_ns, path.read_bytes()) for path in files}
    tiny_config["model"]["lr"] = 0.0123
    workflow.write_config(tiny_config)
    second = workflow.run(f"{RUN}/provenance.json", "--nolock", check=False)
    for process in held:
        process.resume()
    assert second.returncode == 1
    line = hint_line(second.stderr, "is training in another invocation")
    assert second.stderr.count("HINT:") == 1 and "nothing was run" in line
    assert {path: (path.stat().st_ino, path.stat().st_mtime_ns, path.read_bytes()) for path in files} == before
    assert first.wait(timeout=600) == 0
    record = json.loads((run_dir / "provenance.json").read_text())
    assert record["config"]["model"]["lr"] != 0.0123
    trained = log.read_text()
    assert trained.startswith(before[log][2].decode()) and "base: epoch 3/3" in trained, trained[-2000:]
    assert "base: epoch 1/3" in trained
    assert snakeddp_verify(workflow).returncode == 0

    # The HINT: the training finished, so snakemake again trains the new config.
    workflow.run(f"{RUN}/provenance.json")
    assert json.loads((run_dir / "provenance.json").read_text())["config"]["model"]["lr"] == 0.0123


def test_an_invocation_for_other_targets_leaves_a_training_runs_log_where_it_is_written(
    workflow: Workflow, tiny_config
):
    workflow.write_config(tiny_config)
    run_dir, log = workflow.directory / RUN, workflow.directory / "logs/train/base.log"
    held = hold_attempt_lock(run_dir)  # what every rank of a training attempt holds
    log.parent.mkdir(parents=True)
    log.write_text("base: epoch 1/3\n")
    workflow.run("results/envs/train.json", "--nolock")
    assert log.read_text() == "base: epoch 1/3\n" and list(log.parent.iterdir()) == [log]
    os.close(held)
    # No longer live and unfinished: the next invocation moves it aside, as for an interrupted attempt.
    (workflow.directory / "results/envs/train.json").unlink()
    workflow.run("results/envs/train.json")
    assert not log.exists() and len(list(log.parent.glob("base.2*.log"))) == 1
