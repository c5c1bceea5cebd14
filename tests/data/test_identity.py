"""A local table's identity: its files' content, hashed once when the workflow plans (each file again only when
its stamp changed, ctime included) and once while ingestion reads it."""

from __future__ import annotations

import json
import os

import pytest

from snakeddp.data import identity
from snakeddp.data.identity import Check, cached_fingerprint, fingerprint
from snakeddp.data.table import TableError, ingest
from tests.data.test_table import files_of
from tests.tables import frame, params


def test_fingerprint_follows_content_and_the_cache_notices_changes(tmp_path):
    path, cache = tmp_path / "t.csv", tmp_path / "cache.json"
    frame().to_csv(path, index=False)
    first = cached_fingerprint(path, "auto", cache)
    assert first == fingerprint(path) and json.loads(cache.read_text())
    assert cached_fingerprint(path, "auto", cache) == first
    frame(seed=1).to_csv(path, index=False)
    assert cached_fingerprint(path, "auto", cache) == fingerprint(path) != first


@pytest.fixture
def hashed(monkeypatch) -> list[str]:
    """The names of the files hashed (the real hash, counted); stamps trusted at once (no second's wait)."""
    names: list[str] = []
    real = identity.sha256_file
    monkeypatch.setattr(identity, "sha256_file", lambda path: names.append(os.path.basename(path)) or real(path))
    monkeypatch.setattr(identity, "SETTLED_NS", -(10**12))
    return names


def test_the_plan_hashes_again_only_the_files_whose_stamp_changed(tmp_path, hashed):
    folder, cache = tmp_path / "t", tmp_path / "cache.json"
    folder.mkdir()
    for i in range(3):
        frame(rows=50, seed=i).to_csv(folder / f"part-{i}.csv", index=False)
    first = cached_fingerprint(folder, "auto", cache)
    assert sorted(hashed) == ["part-0.csv", "part-1.csv", "part-2.csv"]
    hashed.clear()
    assert cached_fingerprint(folder, "auto", cache) == first and hashed == []
    frame(rows=50, seed=9).to_csv(folder / "part-1.csv", index=False)
    changed = cached_fingerprint(folder, "auto", cache)
    assert hashed == ["part-1.csv"] and changed != first
    hashed.clear()
    assert changed == fingerprint(folder), "the same identity as hashing every file"


def test_a_large_hash_at_the_plan_is_said_before_and_after_and_only_for_the_files_it_hashes(
    tmp_path, hashed, monkeypatch, capsys
):
    """Snakemake prints nothing while the Snakefile is read: a table new to the workflow says why the start waits."""
    folder, cache = tmp_path / "t", tmp_path / "cache.json"
    folder.mkdir()
    for i in range(3):
        frame(rows=50, seed=i).to_csv(folder / f"part-{i}.csv", index=False)
    size = sum(p.stat().st_size for p in folder.iterdir())
    monkeypatch.setattr(identity, "SAY_HASHING_BYTES", size)
    cached_fingerprint(folder, "auto", cache)
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 2, said
    assert said[0].startswith(f"snakeddp: hashing 3 of 3 files of {folder} (") and str(cache) in said[0]
    assert said[1].startswith(f"snakeddp: hashed {folder} in ") and said[1].endswith(" s")
    cached_fingerprint(folder, "auto", cache)
    assert capsys.readouterr().err == "", "nothing hashed, nothing said"
    frame(rows=50, seed=9).to_csv(folder / "part-1.csv", index=False)
    cached_fingerprint(folder, "auto", cache)
    assert hashed[-1:] == ["part-1.csv"] and capsys.readouterr().err == "", "one file, under the size said"
    (folder / "part-0.csv").write_text((folder / "part-0.csv").read_text() * 4)
    cached_fingerprint(folder, "auto", cache)
    assert capsys.readouterr().err.startswith(f"snakeddp: hashing 1 of 3 files of {folder} (")


def test_a_file_rewritten_with_its_old_size_and_mtime_is_hashed_again(tmp_path, hashed):
    """What rsync -t or cp -p leave: the size and mtime of the old file over new bytes. The ctime still moved."""
    path, cache = tmp_path / "t.csv", tmp_path / "cache.json"
    path.write_text("a,b,y\n1,2,0\n")
    first = cached_fingerprint(path, "auto", cache)
    old = os.stat(path)
    path.write_text("a,b,y\n3,4,1\n")
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert (os.stat(path).st_size, os.stat(path).st_mtime_ns) == (old.st_size, old.st_mtime_ns)
    assert cached_fingerprint(path, "auto", cache) == fingerprint(path) != first


@pytest.mark.parametrize("name", ["t.csv", "t.parquet"])
def test_ingestion_checks_the_planned_identity_while_it_reads(tmp_path, name):
    path = tmp_path / name
    write = (
        (lambda data: data.to_csv(path, index=False)) if name.endswith(".csv") else (lambda data: data.to_parquet(path))
    )
    write(frame())
    planned = fingerprint(path)
    ingest(params(path, sha256=planned), tmp_path / "checked")
    ingest(params(path), tmp_path / "unchecked")
    assert files_of(tmp_path / "checked") == files_of(tmp_path / "unchecked")
    write(frame(seed=3))
    with pytest.raises(TableError, match=r"the table's checksum differs from data.table.sha256.*HINT: restore"):
        ingest(params(path, sha256=planned), tmp_path / "out")
    assert not list((tmp_path / "out").rglob("*.safetensors")), "no partition of a refused table is left"
    assert not list((tmp_path / "out").rglob(".*")), "nor a partial one"


def test_a_file_written_while_it_is_read_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    frame().to_csv(path, index=False)
    check = Check(path, fingerprint(path))
    with pytest.raises(TableError, match=r"t.csv: the file changed while it was read. HINT: rerun once"):
        with check.reading([path]):
            frame(seed=2).to_csv(path, index=False)
    check.close()


def test_ingestion_reads_no_file_twice_that_the_plan_hashed_and_nothing_changed_since(tmp_path, hashed):
    folder, cache = tmp_path / "t", tmp_path / "cache.json"
    folder.mkdir()
    for i in range(2):
        frame(rows=60, seed=i).to_parquet(folder / f"part-{i}.parquet")
    planned = cached_fingerprint(folder, "auto", cache)
    hashed.clear()
    check = Check(folder, planned, cache)
    for i in range(2):
        with check.reading([folder / f"part-{i}.parquet"]):
            pass
    check.finish()
    assert hashed == [] and check.hashed_again == 0, "the stamps the plan hashed: its hashes"
    frame(rows=60, seed=7).to_parquet(folder / "part-1.parquet")
    check = Check(folder, planned, cache)
    for i in range(2):
        with check.reading([folder / f"part-{i}.parquet"]):
            pass
    with pytest.raises(TableError, match="the table's checksum differs"):
        check.finish()
    assert hashed == ["part-1.parquet"] and check.hashed_again == 1, "a file changed since the plan: hashed as read"


def test_a_table_planned_on_another_host_of_a_shared_file_system_is_not_hashed_again(tmp_path, hashed):
    """A Slurm job plans again on its node, where an NFS or Lustre mount's device number (the kernel's, given in
    mount order) may differ from the login node's, while the server's inode, size and times are the file's: the
    plan and ingestion there take the hashes the first plan kept. Any other change to the stamp still rehashes."""
    folder, cache = tmp_path / "t", tmp_path / "cache.json"
    folder.mkdir()
    for i in range(2):
        frame(rows=60, seed=i).to_parquet(folder / f"part-{i}.parquet")
    planned = cached_fingerprint(folder, "auto", cache)
    kept = json.loads(cache.read_text())
    for entry in kept["files"].values():
        entry["stamp"][0] += 1  # the device number another host gave the same mount
    cache.write_text(json.dumps(kept))
    hashed.clear()
    assert cached_fingerprint(folder, "auto", cache) == planned and hashed == []
    check = Check(folder, planned, cache)
    for i in range(2):
        with check.reading([folder / f"part-{i}.parquet"]):
            pass
    check.finish()
    assert hashed == [] and check.hashed_again == 0
    for place in (1, 2, 3, 4):  # inode, size, mtime, ctime: each one moved is a file to hash again
        moved = json.loads(cache.read_text())
        entry = moved["files"][str((folder / "part-0.parquet").resolve())]
        entry["stamp"][place] += 1
        cache.write_text(json.dumps(moved))
        hashed.clear()
        assert cached_fingerprint(folder, "auto", cache) == planned and hashed == ["part-0.parquet"], place
