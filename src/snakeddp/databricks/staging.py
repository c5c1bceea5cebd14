"""What a run's Databricks job reads, put under ``databricks.stage``.

    <stage>/code/<sha256>/           the code snapshot (snakeddp.remote.folder: the package, whose
                                     remote/entry.py is the task's python_file), named after its content:
                                     runs of two commits never share it, and an unchanged tree is uploaded once
    <stage>/code/<sha256>.json       written after the last of its files: a folder without it is
                                     an interrupted upload, uploaded again
    <stage>/results/data/<dataset>/  the manifest and the partitions it names (uploaded once: a dataset's
                                     directory is named after its content, so a file there never changes)
    <stage>/results/runs/<run>/      run.yaml and environment.json; cleared first, so nothing of an
                                     earlier submission comes back as this one's result
    <stage>/resume/<run>/            the attempt to resume, when there is one (cleared first): the job's
                                     entry seeds the run's folder from it before training

results/ mirrors the workflow's own, so what the run records (relative paths) reads the same here.

The environment record names the cluster's software (its runtime, or the existing cluster), so a
run resumes only on what it started on, and the cluster the run was sent to (its own job cluster, the
one the workflow's runs share, or the existing one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from snakeddp.data.partitions import load_manifest
from snakeddp.databricks import files
from snakeddp.databricks.settings import Settings
from snakeddp.databricks.spec import ENVIRONMENT_FILE, JobPlan
from snakeddp.run.layout import RUN_FILE
from snakeddp.util.fsutil import atomic_write_json
from snakeddp.util.hashing import sha256_file, sha256_json

RECORD_FORMAT = "snakeddp-databricks-environment/1"
CODE, CODE_FORMAT = "code", "snakeddp-databricks-code/1"


def environment_record(settings: Settings, shared_cluster: str | None = None) -> dict[str, Any]:
    """The cluster's software, hashed: the environment part of the run's attempt key; and the cluster the
    run goes to (``shared_cluster``: the one the workflow created for its runs), outside the hash: a run
    resumes on another cluster of the same runtime, as it does on the next job cluster."""
    if settings.existing_cluster_id:
        identity = {"platform": "databricks", "existing_cluster_id": settings.existing_cluster_id}
        cluster = {"kind": "existing", "id": settings.existing_cluster_id, "shared": True}
    else:
        identity = {"platform": "databricks", "spark_version": settings.new_cluster.spark_version}
        # A job cluster's id exists once the run starts: submission.json records it from runs/get.
        cluster = (
            {"kind": "shared", "id": shared_cluster, "shared": True}
            if shared_cluster
            else {"kind": "job", "id": None, "shared": False}
        )
    return {"format": RECORD_FORMAT, "stage": "train", **identity, "cluster": cluster, "hash": sha256_json(identity)}


def code_path(code_dir: Path) -> str:
    """Where the snapshot goes below the stage: code/ and the sha256 of its names and contents."""
    files = sorted(p for p in code_dir.rglob("*") if p.is_file())
    return f"{CODE}/{sha256_json({p.relative_to(code_dir).as_posix(): sha256_file(p) for p in files})}"


def stage_code(w: Any, plan: JobPlan, code_dir: Path) -> int:
    """Upload the snapshot to ``plan.code`` unless it is there complete; how many files were uploaded."""
    target = f"{plan.stage}/{plan.code}"
    if files.size(w, f"{target}.json") is not None:
        return 0
    sent = files.upload_tree(w, code_dir, target)
    staged = code_dir.parent / f"{code_dir.name}.json"
    atomic_write_json(staged, {"format": CODE_FORMAT, "files": sent})
    files.upload(w, staged, f"{target}.json")
    return sent


def data_files(manifest: Path) -> list[Path]:
    """The manifest and every file it names (a module's data has none)."""
    if manifest.name.startswith("manifest"):
        loaded = load_manifest(manifest)
        names = [entry["file"] for entry in (*loaded["train"], loaded["val"])]
        return [manifest, *(manifest.parent / name for name in names)]
    return [manifest]


def stage_data(w: Any, plan: JobPlan, manifest: Path) -> int:
    """Upload the dataset's files that are not there yet at the same size; how many were uploaded."""
    remote_dir = f"{plan.stage}/{plan.manifest}".rsplit("/", 1)[0]
    sent = 0
    for path in data_files(manifest):
        target = f"{remote_dir}/{path.relative_to(manifest.parent).as_posix()}"
        if files.size(w, target) != path.stat().st_size:
            files.upload(w, path, target)
            sent += 1
    return sent


def stage_run(w: Any, plan: JobPlan, spec_dir: Path, resume_dir: Path | None) -> None:
    """A clean remote run directory holding run.yaml and the environment record, and the attempt to resume
    in a clean folder of its own, which the job's entry seeds the run directory from."""
    files.clear(w, plan.run_dir)
    files.upload(w, spec_dir / RUN_FILE, f"{plan.run_dir}/{RUN_FILE}")
    files.upload(w, spec_dir / ENVIRONMENT_FILE, f"{plan.run_dir}/{ENVIRONMENT_FILE}")
    if resume_dir is not None:
        remote = f"{plan.stage}/{plan.resume_path}"
        files.clear(w, remote)
        files.upload_tree(w, resume_dir, remote)
