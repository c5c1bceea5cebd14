"""A full disk or quota said in one line, on real small filesystems (tmpfs with a size= limit: this suite runs as
root). This machine's kernel is built without CONFIG_QUOTA (ext4 with -O quota and tmpfs' usrquota refuse to
mount), so the quota's case is the OSError a quota raises, EDQUOT, handed to the same writers."""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys

import pytest
import torch

from snakeddp.util.fsutil import append_whole, atomic_write, atomic_write_bytes
from snakeddp.util.space import NoSpaceError, full_disk, said_when_full
from tests.helpers import REPO, subprocess_env
from tests.tables import frame, params

HINT = "HINT: free space there, then run the same command again: what was finished is kept"


@pytest.fixture
def disk(tmp_path):
    """A 256 KiB filesystem of its own."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", mount], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", mount], check=True)


def test_a_write_that_fills_the_disk_names_what_and_where_and_leaves_the_old_file_whole(disk):
    """The line counts the space left once the partial file is gone; the file under the name is the old one."""
    target = disk / "run" / "last.ckpt"
    atomic_write_bytes(target, b"old" * 1000)
    with pytest.raises(NoSpaceError) as raised:
        atomic_write(target, lambda handle: handle.write(b"x" * (1 << 20)), what="the checkpoint")
    assert raised.value.errno == errno.ENOSPC and isinstance(raised.value, OSError)
    free = shutil.disk_usage(disk).free
    assert free > 200 * 1024, "the partial file is gone"
    assert str(raised.value) == (
        f"no space left on the device writing the checkpoint {target} ({free / 1024:.1f} KiB free of 256.0 KiB on "
        f"{disk}). {HINT}, and training resumes from its last checkpoint."
    )
    assert target.read_bytes() == b"old" * 1000
    assert sorted(p.name for p in target.parent.iterdir()) == ["last.ckpt"], "no partial file is left"


def test_an_append_that_fills_the_disk_cuts_the_file_back_to_its_last_whole_record(disk):
    """The sample trace's records (trainer.trace_samples) are appended: a half record is never left at the end."""
    trace = disk / "rank-0.jsonl"
    append_whole(trace, b'{"epoch": 0}\n')
    with pytest.raises(NoSpaceError, match=rf"^no space left on the device writing the sample trace {trace} \("):
        append_whole(trace, b"x" * (1 << 20), what="the sample trace")
    assert trace.read_bytes() == b'{"epoch": 0}\n'
    append_whole(trace, b'{"epoch": 1}\n')
    assert trace.read_bytes() == b'{"epoch": 0}\n{"epoch": 1}\n'


def test_torch_saves_full_disk_is_found_under_the_zip_writers_own_error(disk):
    """torch.save's zip writer meets ENOSPC, then raises its own RuntimeError as it closes; the line is the same."""
    state = {"weights": torch.zeros(1 << 17)}  # 512 KiB
    with pytest.raises(NoSpaceError, match=r"^no space left on the device writing the checkpoint .*HINT: free") as e:
        atomic_write(disk / "a.ckpt", lambda handle: torch.save(state, handle), what="the checkpoint")
    assert isinstance(e.value.__cause__, RuntimeError) and full_disk(e.value.__cause__).errno == errno.ENOSPC
    assert list(disk.iterdir()) == []


def test_a_quota_is_said_the_same_way_with_its_own_hint(tmp_path):
    def over_quota(handle):
        handle.write(b"x" * 4096)
        raise OSError(errno.EDQUOT, "Disk quota exceeded")

    with pytest.raises(NoSpaceError) as raised:
        atomic_write(tmp_path / "metrics.csv", over_quota)
    assert raised.value.errno == errno.EDQUOT
    line = str(raised.value)
    assert line.startswith(f"the disk quota is exceeded writing {tmp_path / 'metrics.csv'} (") and " free of " in line
    assert "HINT: free space within your quota there or have it raised, then run the same command again" in line
    assert list(tmp_path.iterdir()) == []


def test_other_errors_pass_through_unchanged(tmp_path):
    with pytest.raises(OSError) as raised, said_when_full(tmp_path, "the data in"):
        raise OSError(errno.EACCES, "Permission denied")
    assert not isinstance(raised.value, NoSpaceError) and raised.value.errno == errno.EACCES
    with pytest.raises(ValueError, match="^bad$"):
        atomic_write(tmp_path / "x", lambda handle: (_ for _ in ()).throw(ValueError("bad")))


def test_ingesting_a_table_onto_a_full_disk_ends_the_step_in_one_line_and_leaves_nothing(tmp_path, disk):
    """The ingest step, as the data rule runs it: the table's partitions are written in place until the disk is
    full; the step removes them and says so in one line, without a traceback; the traceback is kept beside the
    job's log (its stderr)."""
    frame(rows=20_000).to_parquet(tmp_path / "t.parquet")
    out = disk / "ingest"
    log = tmp_path / "ingest.log"
    step = [sys.executable, "-m", "snakeddp.steps", "ingest", "--params", json.dumps(params(tmp_path / "t.parquet"))]
    with open(log, "w") as stderr:
        done = subprocess.run([*step, "--out", str(out)], cwd=REPO, env=subprocess_env(), stderr=stderr, check=False)
    assert done.returncode == 1
    said = log.read_text()
    (line,) = [line for line in said.splitlines() if "no space" in line]
    assert "Traceback" not in said and "ingest: 20,000 rows read" in said, said
    assert line == (
        f"snakeddp.steps: no space left on the device writing the table's partitions in {out} (256.0 KiB free of "
        f"256.0 KiB on {disk}). {HINT}, and training resumes from its last checkpoint."
    ), line
    assert "OSError: [Errno 28] No space left on device" in (tmp_path / "ingest.log.traceback").read_text()
    assert not [p for p in disk.rglob("*") if p.is_file()], "no partition, partial or complete, is left"
