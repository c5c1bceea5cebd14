"""snakeddp.local.gpulocks: one lock per GPU for the whole machine, taken by processes of any user and let go
when the holder ends, however it ends; the holders named as the kernel lists them."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from snakeddp.errors import LaunchError
from snakeddp.local import gpulocks
from tests.helpers import subprocess_env

UUID = "GPU-00000000-5a1d-4c6e-9f00-standin00000"
# Takes a GPU's lock, says whether it got it, and holds it until its stdin closes.
HOLD = """
import sys
from pathlib import Path
from snakeddp.local import gpulocks
held = gpulocks.hold(Path(sys.argv[1]), sys.argv[2])
print("held" if held is not None else "taken", flush=True)
sys.stdin.read()
"""
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder every user can reach (pytest's are its user's alone), where a lock folder is made."""
    with tempfile.TemporaryDirectory(prefix="gpulocks-") as folder:
        os.chmod(folder, 0o755)
        yield Path(folder)


def holder(folder: Path, uuid: str = UUID, user: list[str] | None = None) -> tuple[subprocess.Popen, str]:
    argv = [*(user or []), sys.executable, "-c", HOLD, str(folder), uuid]
    process = subprocess.Popen(argv, env=subprocess_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return process, process.stdout.readline().strip()


def test_the_folder_is_made_sticky_and_open_to_every_user_in_dev_shm_unless_named(tmp_path, monkeypatch):
    monkeypatch.setattr(gpulocks, "SHM", tmp_path / "shm")
    (tmp_path / "shm").mkdir()
    made = gpulocks.folder({})
    assert made == tmp_path / "shm" / "snakeddp-gpus"
    assert stat.S_IMODE(made.stat().st_mode) == 0o1777
    named = gpulocks.folder({gpulocks.FOLDER: str(tmp_path / "elsewhere")})
    assert named == tmp_path / "elsewhere" and stat.S_IMODE(named.stat().st_mode) == 0o1777


def test_a_held_gpu_is_taken_for_every_other_process_until_its_holder_is_killed(shared):
    locks = gpulocks.folder({gpulocks.FOLDER: str(shared / "locks")})
    first, said = holder(locks)
    assert said == "held"
    assert gpulocks.holders(locks, UUID) == [first.pid]
    assert gpulocks.hold(locks, UUID) is None
    other = gpulocks.hold(locks, UUID.replace("0000-5a1d", "0001-5a1d"))
    assert other is not None, "another GPU is free"
    os.close(other)
    first.kill()  # no clean-up of its own: the kernel lets go
    first.wait()
    first.stdout.close()
    first.stdin.close()
    taken = gpulocks.hold(locks, UUID)
    assert taken is not None and gpulocks.holders(locks, UUID) == [os.getpid()]
    os.close(taken)


def test_another_user_takes_part_in_the_same_locks(shared):
    locks = gpulocks.folder({gpulocks.FOLDER: str(shared / "locks")})
    mine = gpulocks.hold(locks, UUID)  # the file is made by this user, read-only to the rest
    assert mine is not None and stat.S_IMODE((locks / f"{UUID}.lock").stat().st_mode) == 0o644
    theirs, said = holder(locks, user=NOBODY)
    assert said == "taken", "another user sees this user's GPU taken"
    theirs.communicate("")
    os.close(mine)
    theirs, said = holder(locks, user=NOBODY)
    assert said == "held", "and takes it once it is let go"
    assert gpulocks.hold(locks, UUID) is None
    theirs.communicate("")
    # A GPU no one took yet: the other user makes its file, and this user takes it after them.
    theirs, said = holder(locks, UUID.replace("0000-5a1d", "0002-5a1d"), user=NOBODY)
    theirs.communicate("")
    after = gpulocks.hold(locks, UUID.replace("0000-5a1d", "0002-5a1d"))
    assert said == "held" and after is not None
    os.close(after)


def test_a_folder_that_cannot_hold_locks_is_refused_in_one_line_and_its_hint_works(tmp_path):
    (tmp_path / "file").write_text("not a folder\n")
    with pytest.raises(LaunchError) as refused:
        gpulocks.folder({gpulocks.FOLDER: str(tmp_path / "file" / "locks")})
    line = str(refused.value)
    assert "\n" not in line and f"cannot be kept in {tmp_path / 'file' / 'locks'}" in line, line
    assert "HINT: set SNAKEDDP_GPU_LOCKS to a folder every user of this machine can write (mkdir -m 1777" in line
    # What the HINT says.
    subprocess.run(["mkdir", "-m", "1777", str(tmp_path / "shared")], check=True)
    locks = gpulocks.folder({gpulocks.FOLDER: str(tmp_path / "shared")})
    held = gpulocks.hold(locks, UUID)
    assert held is not None
    os.close(held)
