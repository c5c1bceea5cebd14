"""File placement never writes through a hard link into someone else's file; a full disk leaves no half-written
file under a final name and is said in one line. The disks are real small filesystems (tmpfs with a size= limit:
this suite runs as root). This machine's kernel is built without CONFIG_QUOTA (ext4 with -O quota and tmpfs'
usrquota refuse to mount), so the quota's case is the OSError a quota raises, EDQUOT, handed to the same writer."""

from __future__ import annotations

import errno
import os
import pickle
import shutil

import pytest
import torch

from snakeddp.errors import NoSpaceError, full_disk
from snakeddp.util.fsutil import append_whole, atomic_write, atomic_write_bytes, copy_file, link_or_copy

HINT = "HINT: free space there, then run the same command again: what was finished is kept"


def test_link_or_copy_links_and_replaces_without_touching_the_old_targets_source(tmp_path):
    users = tmp_path / "users-config.yaml"
    users.write_text("mine\n")
    other = tmp_path / "other.yaml"
    other.write_text("theirs\n")
    target = tmp_path / "crate" / "config.yaml"
    link_or_copy(users, target)
    assert os.path.samefile(users, target)

    link_or_copy(other, target)  # same name, another source: replace the link, never write through it
    assert users.read_text() == "mine\n"
    assert target.read_text() == "theirs\n" and os.path.samefile(other, target)
    link_or_copy(other, target)  # already in place: nothing to do, nothing left behind
    assert sorted(p.name for p in target.parent.iterdir()) == ["config.yaml"]


def test_copy_file_onto_a_hard_link_leaves_the_linked_file_alone(tmp_path):
    users = tmp_path / "users.yaml"
    users.write_text("mine\n")
    target = tmp_path / "copy.yaml"
    os.link(users, target)
    other = tmp_path / "other.yaml"
    other.write_text("theirs\n")
    copy_file(other, target)
    assert users.read_text() == "mine\n" and target.read_text() == "theirs\n"
    assert not os.path.samefile(users, target)


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
    kept = pickle.loads(pickle.dumps(raised.value))  # as a process pool or a warm job hands it on
    assert (type(kept), kept.errno, str(kept)) == (NoSpaceError, errno.ENOSPC, str(raised.value))
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


def test_a_writers_other_errors_pass_through_unchanged(tmp_path):
    with pytest.raises(ValueError, match="^bad$"):
        atomic_write(tmp_path / "x", lambda handle: (_ for _ in ()).throw(ValueError("bad")))
    assert list(tmp_path.iterdir()) == []
