"""snakeddp.run.runs reads records others may write: ids and paths in them never lead out of their directories."""

from __future__ import annotations

import json

import pytest

from snakeddp.errors import ProvenanceError
from snakeddp.run.runs import load_run


def write_record(run_dir, **record):
    run_dir.mkdir(parents=True)
    (run_dir / "provenance.json").write_text(json.dumps({"run_id": run_dir.name, **record}))
    return run_dir


@pytest.mark.parametrize("run_id", ["../../escape", "/etc", "..", "", None, 7, "a/b"])
def test_a_record_whose_run_id_is_no_run_name_is_refused(tmp_path, run_id):
    run_dir = write_record(tmp_path / "results" / "runs" / "base")
    (run_dir / "provenance.json").write_text(json.dumps({"run_id": run_id}))
    with pytest.raises(ProvenanceError, match=r"which is not a run name.*HINT: this is not a record snakeddp wrote"):
        load_run(run_dir)


@pytest.mark.parametrize("path", ["../../../../escape.ckpt", "/etc/passwd", "checkpoints/../../x.ckpt"])
def test_a_checkpoint_path_out_of_the_run_directory_is_refused(tmp_path, path):
    run = load_run(write_record(tmp_path / "results" / "runs" / "base"))
    with pytest.raises(ProvenanceError, match=r"not inside its run directory.*HINT: .*move .*base out of results/"):
        run.file({"path": path})
    assert run.file({"path": "checkpoints/last.ckpt"}) == run.run_dir / "checkpoints" / "last.ckpt"


@pytest.mark.parametrize("recorded", ["/etc/passwd", "../../outside/manifest-3.json", "results/../../x"])
def test_a_manifest_path_out_of_the_workflow_directory_is_refused(tmp_path, monkeypatch, recorded):
    monkeypatch.chdir(tmp_path)
    run = load_run(write_record(tmp_path / "results" / "runs" / "base", data={"manifest": recorded}))
    with pytest.raises(ProvenanceError, match=r"not inside the workflow's directory"):
        _ = run.manifest_path


def test_a_manifest_path_inside_the_workflow_directory_is_found_relative_or_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    manifest = tmp_path / "results" / "data" / "d-0123456789" / "manifest-3.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text("{}")
    for recorded in ("results/data/d-0123456789/manifest-3.json", str(manifest)):
        run_dir = tmp_path / "results" / "runs" / f"r{len(recorded)}"
        run = load_run(write_record(run_dir, data={"manifest": recorded}))
        assert run.manifest_path.resolve() == manifest.resolve()


def test_the_provenance_schema_and_the_reader_agree_on_what_a_run_name_is():
    from snakeddp.provenance.schema import schema
    from snakeddp.run.layout import RUN_ID_PATTERN

    assert schema()["properties"]["run_id"]["pattern"] == f"^{RUN_ID_PATTERN}$"
