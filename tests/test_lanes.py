"""The Slurm files' lane (tests/lanes.py), run by a real pytest with xdist over a suite of files laid out as this
one's: each test writes down the worker that ran it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, subprocess_env

# In the order the run takes them, the Slurm files first (as tests/conftest.py puts the longest first).
FILES = {
    "tests/slurm/test_profile.py": 3,
    "tests/slurm/test_nodes.py": 2,
    "tests/e2e/test_hints.py": 3,
    "tests/test_bench.py": 2,
    "tests/data/test_table.py": 4,
    "tests/test_cli.py": 1,
    # Enough of the others that some are left when the lanes' Slurm files are done.
    **{f"tests/other/test_short{n}.py": 3 for n in range(8)},
}
CONFTEST = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from tests.lanes import scheduler


def pytest_xdist_make_scheduler(config, log):
    return scheduler(config, log)
"""
TEST = """
import os, pathlib, time

def test_{n}():
    time.sleep(0.2)  # long enough that every worker is up and takes files
    with open(pathlib.Path(__file__).parents[{up}] / "ran.txt", "a") as out:
        out.write(f"{{os.environ['PYTEST_XDIST_WORKER']}} {{__name__}}\\n")
"""


def ran_by(tmp_path: Path, workers: int) -> tuple[dict[str, set[str]], list[tuple[str, str]]]:
    """Which workers ran each file, in a run with ``workers`` workers, and each test's (worker, file) in order."""
    for name, tests in FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(TEST.format(n=n, up=len(Path(name).parents) - 1) for n in range(tests)))
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "ran.txt").unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", str(workers), "--dist", "loadfile",
         "--no-loadscope-reorder", "--rootdir", str(tmp_path), "-c", "/dev/null", "-q", *FILES],
        cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"{sum(FILES.values())} passed" in done.stdout, done.stdout[-3000:]
    ran: dict[str, set[str]] = {}
    order: list[tuple[str, str]] = []
    for line in (tmp_path / "ran.txt").read_text().splitlines():
        worker, module = line.split()
        ran.setdefault(module.rpartition(".")[2], set()).add(worker)
        order.append((worker, module.rpartition(".")[2]))
    return ran, order


SLURM = ("test_profile", "test_nodes")


@pytest.mark.parametrize("count, lanes", [(3, {"gw2"}), (4, {"gw2", "gw3"})])
def test_the_last_workers_run_the_slurm_files_first_then_help_with_the_others(tmp_path, count, lanes):
    """Three workers (`make test`) give the Slurm files one lane, four give them two; a lane whose Slurm files are
    done takes the others' files, and no other worker ever takes a Slurm file."""
    ran, order = ran_by(tmp_path, count)
    assert set(ran) == {Path(name).stem for name in FILES}, ran
    assert set().union(*(ran[module] for module in SLURM)) == lanes, ran
    others = set().union(*(workers for module, workers in ran.items() if module not in SLURM))
    assert {"gw0", "gw1"} <= others, ran
    assert all(len(workers) == 1 for workers in ran.values()), "a file runs on one worker"
    for lane in lanes:
        modules = [module for worker, module in order if worker == lane]
        slurm_done = max(i for i, module in enumerate(modules) if module in SLURM)
        assert all(module in SLURM for module in modules[: slurm_done + 1]), modules
    helped = [module for worker, module in order if worker in lanes and module not in SLURM]
    assert helped, f"no lane took another file once its Slurm files were done: {order}"


def test_with_two_workers_there_is_no_lane(tmp_path):
    ran, _ = ran_by(tmp_path, 2)
    assert set().union(*ran.values()) == {"gw0", "gw1"}, ran
    assert all(len(workers) == 1 for workers in ran.values()), "a file runs on one worker"
