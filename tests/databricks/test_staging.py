"""snakeddp.databricks.staging: the code a run's job runs is staged under a folder named after its content,
through databricks-sdk's Files API against the local stub: two different code trees (two commits) get two
folders, neither overwriting the other; an unchanged tree is not uploaded again; and a folder whose
upload was interrupted (no completion record) is never taken for a staged one."""

from __future__ import annotations

import shutil

from databricks.sdk import WorkspaceClient

from snakeddp.config import validate
from snakeddp.databricks import staging
from snakeddp.databricks.settings import Settings
from snakeddp.databricks.spec import JobPlan, submit_request
from snakeddp.remote.folder import ENTRY, Folder
from tests.databricks_server import DatabricksStub

STAGE = "/Volumes/main/ml/snakeddp"
TOKEN = "dapi-51d0aa-staging-stub-token"
CLUSTER = {"spark_version": "16.4.x-cpu-ml-scala2.12", "node_type_id": "Standard_D4ds_v5"}


def plan(code: str) -> JobPlan:
    return JobPlan(
        run_id="base", nodes=2, devices=1, gpu=False, stage=STAGE, manifest="results/data/d/manifest-3.json",
        code=code, timeout_s=600, new_cluster=CLUSTER,
    )  # fmt: skip


def uploads(stub: DatabricksStub) -> list[str]:
    return [seen["path"] for seen in stub.requests("PUT", "/api/2.0/fs/files")]


def test_two_code_trees_get_two_folders_and_an_unchanged_tree_is_not_uploaded_again(stub, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    w = WorkspaceClient(host=stub.url, token=TOKEN)
    ours = Folder(tmp_path / "a").snapshot()
    first = plan(staging.code_path(ours))
    assert first.code.startswith("code/") and len(first.code) == len("code/") + 64
    sent = staging.stage_code(w, first, ours)
    files = sorted(p.relative_to(ours).as_posix() for p in ours.rglob("*") if p.is_file())
    assert sent == len(files) and ENTRY in files and "snakeddp/launch.py" in files
    staged = stub.local(f"{STAGE}/{first.code}")
    assert sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()) == files
    # The job runs the entry in that folder.
    python_file = submit_request(first)["tasks"][0].spark_python_task.python_file
    assert python_file == f"{STAGE}/{first.code}/{ENTRY}"

    # The same tree again (a fresh snapshot of the same commit): the same folder, nothing uploaded.
    before = len(uploads(stub))
    again = Folder(tmp_path / "b").snapshot()
    assert staging.code_path(again) == first.code
    assert staging.stage_code(w, plan(first.code), again) == 0 and len(uploads(stub)) == before

    # Another commit's tree: its own folder; the first one's files are untouched.
    other = tmp_path / "c" / "code"
    shutil.copytree(ours, other)
    (other / "snakeddp" / "launch.py").write_text((ours / "snakeddp" / "launch.py").read_text() + "\n# changed\n")
    second = plan(staging.code_path(other))
    assert second.code != first.code
    assert staging.stage_code(w, second, other) == len(files)
    assert (staged / "snakeddp" / "launch.py").read_text() == (ours / "snakeddp" / "launch.py").read_text()
    assert stub.local(f"{STAGE}/{second.code}/snakeddp/launch.py").read_text().endswith("# changed\n")


def test_a_folder_whose_upload_was_interrupted_is_uploaded_again(stub, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    w = WorkspaceClient(host=stub.url, token=TOKEN)
    code = Folder(tmp_path).snapshot()
    staged = plan(staging.code_path(code))
    folder = stub.local(f"{STAGE}/{staged.code}")
    # What an interrupted upload leaves: some of the files, no completion record.
    (folder / "snakeddp").mkdir(parents=True)
    (folder / "snakeddp" / "launch.py").write_text("truncat")
    assert staging.stage_code(w, staged, code) > 1
    assert (folder / "snakeddp" / "launch.py").read_bytes() == (code / "snakeddp" / "launch.py").read_bytes()
    assert stub.local(f"{STAGE}/{staged.code}.json").is_file()


def settings(**given) -> Settings:
    return Settings.of(validate({"databricks": given})["databricks"])


def test_the_environment_record_names_the_cluster_outside_its_hash():
    """A run resumes on any cluster of the runtime it started on: its own job cluster, or the one a later
    invocation's runs share; an existing cluster is the software itself, so it is in the hash."""
    section = settings(new_cluster=CLUSTER)
    own, shared = staging.environment_record(section), staging.environment_record(section, "0101-shared")
    assert own["cluster"] == {"kind": "job", "id": None, "shared": False}
    assert shared["cluster"] == {"kind": "shared", "id": "0101-shared", "shared": True}
    assert own["hash"] == shared["hash"]
    existing = staging.environment_record(settings(existing_cluster_id="0101-mine", new_cluster=CLUSTER))
    assert existing["cluster"] == {"kind": "existing", "id": "0101-mine", "shared": True}
    assert existing["hash"] != own["hash"]
