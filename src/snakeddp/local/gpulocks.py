"""A lock per GPU that every snakeddp run on this machine takes, whoever started it and from whichever
checkout: a file per GPU named by its UUID (the same GPU under any CUDA_VISIBLE_DEVICES), held with
``flock`` while the job lives. The kernel lets go when the holder ends, however it ends, so a killed run
never leaves a GPU taken; ``flock`` needs only a descriptor opened for reading, so the files can stay
their creator's and read-only to the rest, in a sticky folder every user may add to (as /tmp).

The folder is /dev/shm's (a tmpfs each machine has, emptied at boot, like the locks it holds), or
``SNAKEDDP_GPU_LOCKS`` where the machine's users do not share one (containers sharing GPUs: mount one
folder into each and name it there).
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

from snakeddp.errors import LaunchError

#: Where the locks live, where /dev/shm is not the machine's one folder.
FOLDER = "SNAKEDDP_GPU_LOCKS"
SHM = Path("/dev/shm")  # noqa: S108 (a folder of locks, each opened without following links)
NAME = "snakeddp-gpus"


def folder(env: Mapping[str, str]) -> Path:
    """The machine's folder of GPU locks, made (sticky, open to every user) where it is not there yet."""
    if env.get(FOLDER):
        path = Path(env[FOLDER])
    else:
        path = (SHM if SHM.is_dir() else Path(tempfile.gettempdir())) / NAME
    try:
        path.mkdir(mode=0o700, exist_ok=False)
        # Every user adds locks (sticky: none removes another's); set after mkdir, which the umask narrows.
        os.chmod(path, 0o1777)  # noqa: S103
    except FileExistsError:
        pass
    except OSError as error:
        raise unusable(path, error) from None
    return path


def unusable(path: Path, error: OSError) -> LaunchError:
    return LaunchError(
        f"the machine's GPU locks cannot be kept in {path} ({error.strerror or error}), so this run cannot know "
        f"which GPUs other runs hold. HINT: set {FOLDER} to a folder every user of this machine can write "
        "(mkdir -m 1777 FOLDER), and export it in each shell that runs snakeddp."
    )


def hold(path: Path, uuid: str, shared: bool = False) -> int | None:
    """A descriptor holding ``uuid``'s lock (shared with other sharers, where ``shared``), or None where another
    process holds it. Close the descriptor to let go."""
    lock = path / f"{uuid}.lock"
    descriptor = _open(lock)
    try:
        fcntl.flock(descriptor, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    return descriptor


def _open(lock: Path) -> int:
    # The existing file first, without O_CREAT: where fs.protected_regular is set, O_CREAT on another user's
    # file in a sticky folder is refused even though the file exists.
    while True:
        try:
            return os.open(lock, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            pass
        except OSError as error:
            raise unusable(lock.parent, error) from None
        try:
            descriptor = os.open(lock, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            continue  # another process made it first: open theirs
        except OSError as error:
            raise unusable(lock.parent, error) from None
        os.fchmod(descriptor, 0o644)
        return descriptor


def holders(path: Path, uuid: str) -> list[int]:
    """The pids that hold ``uuid``'s lock, as the kernel lists them (/proc/locks, what lslocks reads)."""
    try:
        found = os.stat(path / f"{uuid}.lock")
        table = Path("/proc/locks").read_text(encoding="utf-8")
    except OSError:
        return []
    device = f"{os.major(found.st_dev):02x}:{os.minor(found.st_dev):02x}:{found.st_ino}"
    pids = re.findall(rf"^\d+: FLOCK\s+\S+\s+\S+\s+(\d+)\s+{re.escape(device)}\s", table, re.MULTILINE)
    return sorted({int(pid) for pid in pids})
