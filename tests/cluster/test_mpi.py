"""mpirun's daemon options inside Slurm, spelled for the installed OpenMPI: ORTE's ``--mca`` up to
4, PRRTE's ``--prtemca`` from 5.

The real mpirun, ompi_info and (with OpenMPI 5) prte_info of this machine answer here; CI installs
OpenMPI 4.1.4 (Debian bookworm, tools/system-packages.sh). OpenMPI 5's side was checked by hand with
Debian trixie's openmpi-bin 5.0.7 (PRRTE 3.0.8) in a chroot, which CI does not build:

    mmdebstrap --variant=minbase --include=openmpi-bin trixie /tmp/trixie
    mount -t proc proc /tmp/trixie/proc && mount -t sysfs sysfs /tmp/trixie/sys
    chroot /tmp/trixie prte_info --param plm:slurm      # "plm_slurm_args", Custom arguments to srun
    chroot /tmp/trixie prte_info --param ras:base       # "ras_base_launch_orted_on_hn"
    chroot /tmp/trixie mpirun --prtemca ras_base_launch_orted_on_hn 1 \\
        --prtemca plm_slurm_args "--cpus-per-task=8 --gres=gpu:2" --version    # exit 0

and, inside a Slurm-like environment (SLURM_JOBID, SLURM_NODELIST, SLURM_TASKS_PER_NODE) with an
``srun`` on PATH that records its arguments, ``mpirun`` with those options asked srun for
``--ntasks-per-node=1 ... --cpus-per-task=8 --gres=gpu:2 --ntasks=1 prted ...``: the daemon step
on mpirun's own node, with the CPUs and GPUs given. ``--mca`` gave the same (mpirun 5 guesses
PRRTE's parameters from it); mpirun 4.1.4 refuses ``--prtemca`` ("unknown option").
"""

import re
import shutil
import subprocess

import pytest

from snakeddp import cluster
from snakeddp.cluster import LaunchError, LaunchPlan
from snakeddp.cluster.mpi import installed_major, openmpi_major
from snakeddp.slurm.launcher import SlurmAllocation

MPIRUN = shutil.which("mpirun")
# Inside an allocation, as snakemake-executor-plugin-slurm's jobstep leaves it (see test_cluster.JOBSTEP_ENV).
SLURM_ENV = {"SLURM_JOB_ID": "4321", "SLURM_JOB_NODELIST": "gpu[07-08]", "MASTER_ADDR": "10.1.0.7"}
PARAMETERS = ("ras_base_launch_orted_on_hn", "plm_slurm_args")


def plan(**kw):
    base = {"nodes": 2, "devices": 2, "threads_per_process": 1, "master_port": None, "python": "python", "entry": ()}
    return LaunchPlan(**{**base, **kw})


def ompi_info_major() -> int:
    """The installed OpenMPI's major version as ompi_info reports it ("Open MPI v4.1.4"), not as the code reads it."""
    done = subprocess.run(["ompi_info", "--version"], capture_output=True, text=True, timeout=60, check=True)
    return int(re.search(r"Open MPI v(\d+)\.", done.stdout)[1])


def run(*argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


# What `mpirun --version` prints: Debian bookworm's 4.1.4 (here) and trixie's 5.0.7 (the chroot above).
VERSIONS = [
    ("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n", 4),
    ("mpirun (Open MPI) 5.0.7\n\nReport bugs to https://www.open-mpi.org/community/help/\n", 5),
    ("mpirun (Open MPI) 3.1.6\n\nReport bugs to http://www.open-mpi.org/community/help/\n", 3),
]


@pytest.mark.parametrize(("output", "major"), VERSIONS)
def test_the_major_version_is_read_from_mpiruns_answer(output, major):
    assert openmpi_major(output) == major


@pytest.mark.parametrize(
    "output",
    [
        "HYDRA build details:\n    Version:                                 4.1.2\n",
        "Intel(R) MPI Library for Linux* OS",
    ],
)
def test_an_mpirun_of_another_mpi_is_refused_with_a_hint(output):
    with pytest.raises(LaunchError, match=r"^mpirun: /opt/mpi/bin/mpirun is not Open MPI's .*HINT: ") as refused:
        openmpi_major(output, "/opt/mpi/bin/mpirun")
    assert "\n" not in str(refused.value)


def test_the_installed_mpirun_is_asked_without_a_job_and_agrees_with_ompi_info():
    assert MPIRUN, "needs OpenMPI's mpirun: tools/system-packages.sh installs it"
    assert installed_major(MPIRUN) == ompi_info_major()


@pytest.mark.parametrize(("major", "option"), [(3, "--mca"), (4, "--mca"), (5, "--prtemca"), (6, "--prtemca")])
def test_daemon_options_take_the_runtimes_own_option(major, option):
    options = SlurmAllocation().mpirun_options(plan(gpus=True, cpus_per_process=4), major)
    assert options == [
        option,
        "ras_base_launch_orted_on_hn",
        "1",
        option,
        "plm_slurm_args",
        "--cpus-per-task=8 --gres=gpu:2",
    ]


def test_inside_slurm_the_command_is_spelled_for_the_installed_openmpi():
    argv, _ = cluster.get("mpirun").command(plan(gpus=True), SLURM_ENV)
    option = "--prtemca" if ompi_info_major() >= 5 else "--mca"
    for name in PARAMETERS:
        assert argv[argv.index(name) - 1] == option
    assert argv.count(option) == 2


def test_the_installed_mpirun_parses_the_options_built_for_it():
    """mpirun parses every option before it answers --version: 4 refuses --prtemca, 5 takes it."""
    options = SlurmAllocation().mpirun_options(plan(gpus=True), installed_major(MPIRUN))
    done = run(MPIRUN, *options, "--version")
    assert done.returncode == 0 and "(Open MPI)" in done.stdout, done.stdout + done.stderr
    if "--mca" in options:  # and OpenMPI 4 refuses PRRTE's option, so this check tells the two apart
        assert run(MPIRUN, "--prtemca", "plm_slurm_args", "x", "--version").returncode != 0


def test_the_parameters_exist_in_the_installed_runtime():
    """The names, as the installed runtime lists its parameters: ompi_info up to 4, prte_info from 5."""
    if ompi_info_major() >= 5:
        listings = [["prte_info", "--param", "ras:base"], ["prte_info", "--param", "plm:slurm"]]
    else:
        listings = [
            ["ompi_info", "--param", "ras", "base", "--level", "9"],
            ["ompi_info", "--param", "plm", "slurm", "--level", "9"],
        ]
    for name, listing in zip(PARAMETERS, listings, strict=True):
        assert f'"{name}"' in run(*listing).stdout, listing


def test_no_mpirun_on_the_jobs_path_is_one_error_with_a_hint(tmp_path):
    with pytest.raises(LaunchError, match=r"^mpirun: no mpirun on PATH\. HINT: install OpenMPI"):
        cluster.get("mpirun").command(plan(), {**SLURM_ENV, "PATH": str(tmp_path)})
