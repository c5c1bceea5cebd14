"""A process's view of a stand-in machine (tests only): its own mount namespace (as root), with the machine's
kernel driver files over /proc/driver, its /dev, and a CUDA build's torch/version.py over the installed one's.

The machine's /dev is a tmpfs (nodev) over /dev holding every entry of the host's /dev bound in but its NVIDIA
device nodes, which it replaces with the machine's own (``StandIn``'s ``dev`` file, a line per node):
``nvidia2 open`` is a file that opens, ``nvidia0 denied`` a character device on that nodev tmpfs, which
``open`` refuses with EACCES, as a device cgroup refuses a GPU it denies (with EPERM). So a real GPU host's
/dev/nvidia0 is never seen where the stand-in models a host without it.

``python standin_machine.py DRIVER DEV VERSION_PY TARGET -- COMMAND...`` enters it and runs COMMAND
(``StandIn.command``); tests/gpu_standin/forks.py enters it in each forked check with ``enter``, and a Snakemake run
forked from the harness's server (tests/forked_snakemake.py) with ``enter_mounts``, from the same four arguments.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
import tempfile

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_MOVE, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8192, 4096, 16384, 1 << 18
NVIDIA_MAJOR = 195
LIBC = ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: str, kind: str | None, flags: int, options: str | None = None) -> None:
    encoded = options.encode() if options else None
    if LIBC.mount(source.encode(), target.encode(), kind.encode() if kind else None, flags, encoded) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mount {source} on {target}: {os.strerror(error)}")


def _cover_dev(nodes: str) -> None:
    """/dev as the machine has it: the host's entries but its NVIDIA nodes, and the machine's own nodes."""
    staging = tempfile.mkdtemp(prefix="standin-dev-")
    _mount("standin-dev", staging, "tmpfs", MS_NODEV | MS_NOSUID, "mode=755")
    for entry in os.scandir("/dev"):
        if entry.name.startswith("nvidia"):
            continue
        target = os.path.join(staging, entry.name)
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), target)
            continue
        directory = entry.is_dir(follow_symlinks=False)
        if directory:
            os.mkdir(target)
        else:
            open(target, "w").close()
        try:
            _mount(entry.path, target, None, MS_BIND | (MS_REC if directory else 0))
        except OSError:  # an entry this host will not bind (none seen yet): left out rather than the machine lost
            (os.rmdir if directory else os.unlink)(target)
    with open(nodes) as lines:
        for name, kind in (line.split() for line in lines if line.strip()):
            target = os.path.join(staging, name)
            if kind == "open":
                open(target, "w").close()
            else:
                minor = int(name.removeprefix("nvidia"))
                os.mknod(target, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
    _mount(staging, "/dev", None, MS_MOVE)
    os.rmdir(staging)  # the empty folder left on the host's /tmp: the tmpfs is /dev now


def enter(driver: str, nodes: str, torch_version: tuple[str, str] | None = None) -> None:
    """This process's own mount namespace, with ``driver`` over /proc/driver, the machine's /dev (``nodes``:
    its nodes' file), and ``torch_version``'s (file, installed file) bound where given."""
    if LIBC.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    _mount(driver, "/proc/driver", None, MS_BIND)
    _cover_dev(nodes)
    if torch_version:
        _mount(torch_version[0], torch_version[1], None, MS_BIND)


def enter_mounts(mounts: list[str]) -> None:
    """``enter`` from the script's DRIVER DEV VERSION_PY TARGET: what it enters before its exec, and a forked run
    before its main."""
    driver, nodes, version, target = mounts
    enter(driver, nodes, (version, target))


if __name__ == "__main__":
    mounts, separator, command = sys.argv[1:5], sys.argv[5], sys.argv[6:]
    assert separator == "--", sys.argv
    enter_mounts(mounts)
    os.execvp(command[0], command)
