"""Launchers: each maps its own variables to the canonical layout, or refuses clearly."""

import os
import socket
import subprocess
import sys
from unittest import mock

import pytest

from snakeddp import cluster, launch
from snakeddp.cluster import LaunchError, LaunchPlan, guard_foreign_launch, supervisor
from snakeddp.slurm.launcher import root_node
from tests.cluster.refusal import IMPORTED, torch_unimportable
from tests.helpers import prepare, subprocess_env

TORCHRUN = {
    "TORCHELASTIC_RUN_ID": "abc",
    "RANK": "3",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29400",
}
SRUN = {
    "SLURM_JOB_ID": "123456",
    "SLURM_PROCID": "2",
    "SLURM_LOCALID": "0",
    "SLURM_NTASKS": "4",
    "SLURM_NNODES": "2",
    "SLURM_NODEID": "1",
    "SLURM_NTASKS_PER_NODE": "2",
    "SLURM_STEP_ID": "0",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
}
# AzureML's MPI distribution on two nodes: OpenMPI variables plus AZ_BATCH_MASTER_NODE "addr:port".
AZUREML_MPI = {
    "OMPI_COMM_WORLD_RANK": "3",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    "AZ_BATCH_MASTER_NODE": "10.0.0.4:6105",
    "AZUREML_RUN_ID": "run-1",
}
# Single-node MPI jobs get AZ_BATCHAI_MPI_MASTER_NODE (an address, no port).
AZUREML_MPI_SINGLE = {
    "OMPI_COMM_WORLD_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_SIZE": "2",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    "AZ_BATCHAI_MPI_MASTER_NODE": "10.0.0.5",
}
# A single-node AzureML PyTorch job as snakeddp submits it: the job spec adds LOCAL_WORLD_SIZE.
AZUREML_PYTORCH_SINGLE = {
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "2",
    "NODE_RANK": "0",
    "MASTER_ADDR": "10.0.0.7",
    "MASTER_PORT": "6105",
    "LOCAL_WORLD_SIZE": "2",
}
# AzureML's PyTorch distribution exports torch's variables itself.
AZUREML_PYTORCH = {
    "RANK": "2",
    "LOCAL_RANK": "0",
    "WORLD_SIZE": "4",
    "NODE_RANK": "1",
    "MASTER_ADDR": "10.0.0.6",
    "MASTER_PORT": "6105",
    "AZUREML_NODE_COUNT": "2",
    "AZUREML_RUN_ID": "run-2",
}


def as_tuple(layout):
    return (
        layout.launcher,
        layout.rank,
        layout.local_rank,
        layout.world_size,
        layout.local_world_size,
        layout.node_rank,
        layout.num_nodes,
        layout.master_addr,
        layout.master_port,
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (TORCHRUN, ("torchrun", 3, 1, 4, 2, 1, 2, "10.0.0.1", 29400)),
        (SRUN, ("srun", 2, 0, 4, 2, 1, 2, "gpu07", 18456)),
        (AZUREML_MPI, ("mpirun", 3, 1, 4, 2, 1, 2, "10.0.0.4", 6105)),
        (AZUREML_MPI_SINGLE, ("mpirun", 1, 1, 2, 2, 0, 1, "10.0.0.5", 29500)),
        (AZUREML_PYTORCH, ("env", 2, 0, 4, 2, 1, 2, "10.0.0.6", 6105)),
        (AZUREML_PYTORCH_SINGLE, ("env", 1, 1, 2, 2, 0, 1, "10.0.0.7", 6105)),
        ({}, ("spawn", 0, 0, 1, 1, 0, 1, "127.0.0.1", None)),
    ],
)
def test_detect_and_map(env, expected):
    _, layout = cluster.resolve(None, env)
    assert as_tuple(layout) == expected


def test_torchrun_inside_slurm_is_torchrun():
    assert cluster.detect({**SRUN, **TORCHRUN}).name == "torchrun"


def test_direct_ranks_map_from_the_variables_the_supervisor_sets():
    """Both sides of the local launcher: what supervisor.rank_environments exports, direct reads."""
    environments = supervisor.rank_environments(2, 29411, {**SRUN, "PATH": "/bin"})  # even inside Slurm
    layouts = [cluster.resolve(None, env)[1] for env in environments]
    assert [as_tuple(layout) for layout in layouts] == [
        ("direct", rank, rank, 2, 2, 0, 1, "127.0.0.1", 29411) for rank in (0, 1)
    ]
    assert layouts[0].job_id == layouts[1].job_id and len(layouts[0].job_id) == 32  # one launch id per start
    assert environments[0]["PATH"] == "/bin"
    layouts[0].check_matches(nodes=1, devices=2)
    environment = cluster.get("direct").lightning_environment(layouts[1])
    assert (environment.global_rank(), environment.world_size(), environment.main_port) == (1, 2, 29411)


def test_mpirun_inside_slurm_is_mpirun_and_uses_the_first_node():
    env = {
        **SRUN,
        "OMPI_COMM_WORLD_RANK": "0",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    }
    _, layout = cluster.resolve(None, env)
    assert layout.launcher == "mpirun" and layout.master_addr == "gpu07" and layout.job_id == "123456"


@pytest.mark.parametrize(
    "nodelist", ["gpu07", "gpu[07-08]", "gpu[07,09-10]", "gpu[5]", "gpu07,cpu[01-02]", "gpu[07-08],cpu01", "a1 b2"]
)
def test_the_first_node_of_a_slurm_node_list_is_the_one_lightnings_slurm_environment_picks(nodelist):
    from lightning.fabric.plugins.environments import SLURMEnvironment

    assert root_node(nodelist) == SLURMEnvironment.resolve_root_node_address(nodelist)


def test_the_slurm_launcher_finds_the_first_node_without_importing_lightning():
    """A Slurm job's launcher starts no rank: Lightning's import was seconds of its start."""
    probe = (
        "import sys; from snakeddp.slurm import launcher; "
        "print(launcher.root_node('gpu[07-08]'), 'lightning' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=subprocess_env(), capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["gpu07", "False"]


def test_explicit_master_addr_wins():
    _, layout = cluster.resolve("mpirun", {**AZUREML_MPI, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1234"})
    assert (layout.master_addr, layout.master_port) == ("127.0.0.1", 1234)


def test_expected_launcher_without_its_variables_refuses_to_train():
    with pytest.raises(LaunchError, match="meant to be started by mpirun.*OMPI_COMM_WORLD_RANK"):
        cluster.resolve("mpirun", {"SLURM_JOB_ID": "1"})
    with pytest.raises(LaunchError, match="meant to be started by srun"):
        cluster.resolve("srun", {})


def test_spawning_under_another_launcher_refuses_duplicate_training():
    with pytest.raises(LaunchError, match="started by mpirun as rank 1 of 2.*HINT: pass --launcher mpirun"):
        cluster.resolve("spawn", AZUREML_MPI_SINGLE)
    with pytest.raises(LaunchError, match="started by srun"):
        guard_foreign_launch(SRUN)
    # What the HINT says: name the launcher, and the ranks it started are used.
    launcher, layout = cluster.resolve("mpirun", AZUREML_MPI_SINGLE)
    assert (launcher.name, layout.rank, layout.world_size) == ("mpirun", 1, 2)


def test_multi_node_mpi_without_an_address_fails():
    env = {k: v for k, v in AZUREML_MPI.items() if k != "AZ_BATCH_MASTER_NODE"}
    with pytest.raises(LaunchError, match="needs the address of rank 0's node. HINT: export MASTER_ADDR"):
        cluster.resolve("mpirun", env)
    _, layout = cluster.resolve("mpirun", {**env, "MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "6200"})
    assert (layout.master_addr, layout.master_port) == ("10.0.0.9", 6200)


def test_uneven_layouts_are_rejected():
    with pytest.raises(LaunchError, match="do not split evenly"):
        cluster.resolve("mpirun", {**AZUREML_MPI_SINGLE, "OMPI_COMM_WORLD_SIZE": "3"})


def test_layout_must_match_the_run_config():
    _, layout = cluster.resolve(None, TORCHRUN)
    layout.check_matches(nodes=2, devices=2)
    with pytest.raises(LaunchError, match="asks for launch.nodes=1 x launch.devices=4"):
        layout.check_matches(nodes=1, devices=4)


TORCHRUN_RANK_0 = {**TORCHRUN, "RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0"}
MPIRUN_RANK_0 = {**AZUREML_MPI_SINGLE, "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}


@pytest.mark.parametrize(
    ("env", "args", "refusal"),
    [
        ({}, ["--launcher", "mpirun"], "meant to be started by mpirun, but its variables are missing"),
        (TORCHRUN_RANK_0, [], "asks for launch.nodes=1 x launch.devices=1"),
        (MPIRUN_RANK_0, ["--launcher", "spawn"], "started by mpirun as rank 0 of 2, but training was asked to spawn"),
        ({}, [], "manifest.json: no such dataset manifest"),
    ],
)
def test_a_rank_that_cannot_resolve_its_layout_is_refused_before_it_imports_torch(tmp_path, env, args, refusal):
    """`python -m snakeddp.train` as a misconfigured launcher starts it: its one line, at once, where torch
    and Lightning took seconds to import first; torch is unimportable here, so a rank that imported it fails."""
    (tmp_path / "config.yaml").write_text("{}\n")  # a plain config file: the run "base", one process
    train = ["-m", "snakeddp.train", "--config", "config.yaml", "--run-dir", "run", "--data", "manifest.json"]
    environment = subprocess_env(**env)
    environment["PYTHONPATH"] = f"{torch_unimportable(tmp_path)}:{environment['PYTHONPATH']}"
    done = subprocess.run(
        [sys.executable, *train, *args], cwd=tmp_path, env=environment, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1 and done.stdout == "", done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("snakeddp.train: ") and refusal in line and "HINT: " in line, line
    assert not (tmp_path / "run").exists()


def test_a_rank_whose_layout_resolves_goes_on_to_import_torch(tmp_path):
    """The other side of the test above: its unimportable torch stops a rank that gets past the check."""
    (tmp_path / "config.yaml").write_text("{}\n")
    (tmp_path / "manifest.json").write_text("{}\n")  # read after the imports
    train = ["-m", "snakeddp.train", "--config", "config.yaml", "--run-dir", "run", "--data", "manifest.json"]
    environment = subprocess_env()
    environment["PYTHONPATH"] = f"{torch_unimportable(tmp_path)}:{environment['PYTHONPATH']}"
    done = subprocess.run([sys.executable, *train], cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert done.returncode == 1 and f"ImportError: {IMPORTED}" in done.stderr, done.stdout + done.stderr


def plan(**kw):
    base = {
        "nodes": 1,
        "devices": 2,
        "threads_per_process": 1,
        "master_port": None,
        "python": "/opt/my env/python",
        "entry": ("--config", "run dir/run.yaml"),
    }
    return LaunchPlan(**{**base, **kw})


def test_torchrun_command_is_single_node():
    argv, _ = cluster.get("torchrun").command(plan(), {})
    assert argv[:3] == ["/opt/my env/python", "-m", "snakeddp.cluster.agent"]  # torchrun, frozen at exit
    assert "--nproc-per-node=2" in argv and "--standalone" in argv
    assert argv[-4:] == ["-m", "snakeddp.train", "--config", "run dir/run.yaml"]
    with pytest.raises(LaunchError, match="launch.nodes=2"):
        cluster.get("torchrun").command(plan(nodes=2), {})


def test_direct_command_is_the_supervisor_on_one_node():
    argv, exports = cluster.get("direct").command(plan(), {})
    assert argv[:5] == ["/opt/my env/python", "-m", "snakeddp.cluster.supervisor", "--nproc-per-node=2", "--fork-ranks"]
    assert argv[5:10] == ["--", "/opt/my env/python", "-m", "snakeddp.train", "--config"] and exports == {}
    # SNAKEDDP_WARM_START=0: every rank a process of its own, as before forking existed.
    assert "--fork-ranks" not in cluster.get("direct").command(plan(), {"SNAKEDDP_WARM_START": "0"})[0]
    with pytest.raises(LaunchError, match="SNAKEDDP_WARM_START='no' is neither 1 nor 0. HINT:"):
        cluster.get("direct").command(plan(), {"SNAKEDDP_WARM_START": "no"})
    assert "--master-port=4321" in cluster.get("direct").command(plan(master_port=4321), {})[0]
    with pytest.raises(LaunchError, match="launch.nodes=2. HINT:"):
        cluster.get("direct").command(plan(nodes=2), {})


def test_srun_command_requests_the_layout():
    argv, _ = cluster.get("srun").command(plan(nodes=2, devices=2, threads_per_process=3), {})
    assert argv[:7] == [
        "srun",
        "--nodes=2",
        "--ntasks=4",
        "--ntasks-per-node=2",
        "--cpus-per-task=3",
        "--kill-on-bad-exit=1",
        "--export=ALL",
    ]


def test_mpirun_command_exports_the_rendezvous():
    argv, exports = cluster.get("mpirun").command(plan(master_port=4321), {})
    assert argv[:4] == ["mpirun", "-np", "2", "--map-by"]
    assert exports["MASTER_ADDR"] == "127.0.0.1" and exports["MASTER_PORT"] == "4321"
    assert "-x" in argv and "MASTER_PORT" in argv


def test_mpirun_on_one_machine_with_no_rendezvous_named_meets_on_a_free_port_it_holds():
    """Two single-node runs started at once each get a port of their own (a fixed 29500 made the second
    fail with EADDRINUSE); the port stays taken for anyone else, and rank 0's store can still listen on it."""
    launcher = cluster.get("mpirun")
    ports = [int(launcher.command(plan(), {})[1]["MASTER_PORT"]) for _ in range(2)]
    assert ports[0] != ports[1] and 29500 not in ports, ports
    other = socket.socket()
    with pytest.raises(OSError):
        other.bind(("", ports[0]))
    other.close()
    store = socket.socket()
    store.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    store.bind(("", ports[0]))
    store.listen()
    store.close()
    # A named rendezvous is kept as named; ranks started by hand with no port meet on the default.
    assert launcher.command(plan(), {"MASTER_PORT": "4000"})[1]["MASTER_PORT"] == "4000"
    assert launcher.command(plan(), {"AZ_BATCHAI_MPI_MASTER_NODE": "10.0.0.5"})[1]["MASTER_PORT"] == "29500"
    assert launcher.rendezvous({}, 1) == ("127.0.0.1", 29500)


def test_platform_defaults():
    assert cluster.for_platform("auto", "local").name == "direct"
    assert cluster.for_platform("torchrun", "local").name == "torchrun"
    assert cluster.for_platform("auto", "slurm").name == "srun"
    assert cluster.for_platform("mpirun", "local").name == "mpirun"
    with pytest.raises(LaunchError, match="needs the slurm profile"):
        cluster.for_platform("srun", "local")
    assert cluster.for_platform("auto", "azureml").name == "env"


def test_the_command_lines_take_the_schemas_platforms():
    assert launch.parse_args(["--platform", "azureml", "--config", "c", "--run-dir", "r", "--data", "d"]).platform
    with pytest.raises(SystemExit):
        launch.parse_args(["--platform", "k8s", "--config", "c", "--run-dir", "r", "--data", "d"])


# What a rule started by snakemake-executor-plugin-slurm-jobstep sees: the allocation's SLURM_*
# variables and SLURM_CONF removed, the workflow's copy of SLURM_CONF kept.
JOBSTEP_ENV = {
    "SLURM_JOB_ID": "4321",
    "SLURM_JOBID": "4321",
    "SNAKEDDP_SLURM_CONF": "/opt/slurm/etc/slurm.conf",
    "MASTER_ADDR": "10.1.0.7",
}


def test_srun_inside_the_jobstep_restores_the_config_and_fixes_the_rendezvous():
    argv, exports = cluster.get("srun").command(plan(nodes=2, devices=2, gpus=True), JOBSTEP_ENV)
    assert exports == {"SLURM_CONF": "/opt/slurm/etc/slurm.conf", "MASTER_ADDR": "10.1.0.7", "MASTER_PORT": "19321"}
    # Every rank sees its node's GPUs (Lightning uses cuda:<local rank>), no per-task binding.
    assert "--gres=gpu:2" in argv and not any(a.startswith("--gpus-per-task") for a in argv)


def test_mpirun_inside_slurm_signals_every_rank_and_gets_back_the_allocation():
    env = {**JOBSTEP_ENV, "SLURM_JOB_NODELIST": "gpu[07-08]"}
    argv, exports = cluster.get("mpirun").command(plan(nodes=2, devices=2), env)
    # --mca to OpenMPI 4, --prtemca from 5 (test_mpi.py checks which against the installed one).
    at = argv.index("ras_base_launch_orted_on_hn")
    assert argv[at - 1] in ("--mca", "--prtemca") and argv[at + 1] == "1"
    assert exports["SLURM_NODELIST"] == "gpu[07-08]" and exports["SLURM_TASKS_PER_NODE"] == "2(x2)"
    assert exports["SLURM_CONF"] == "/opt/slurm/etc/slurm.conf"
    exported_to_ranks = {argv[i + 1] for i, a in enumerate(argv) if a == "-x"}
    assert {"MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS"} <= exported_to_ranks
    assert "SLURM_NODELIST" not in exported_to_ranks and "--oversubscribe" not in argv


def test_srun_gives_each_gpu_rank_the_cpus_its_job_reserved():
    argv, _ = cluster.get("srun").command(plan(gpus=True, threads_per_process=1, cpus_per_process=4), JOBSTEP_ENV)
    assert "--cpus-per-task=4" in argv and "--gres=gpu:2" in argv


def test_mpirun_daemons_get_the_cpus_and_gpus_of_their_nodes_ranks():
    """OpenMPI starts its daemons with srun inside the allocation; plm_slurm_args is what that step asks for."""
    env = {**JOBSTEP_ENV, "SLURM_JOB_NODELIST": "gpu[07-08]"}
    gpu_argv, _ = cluster.get("mpirun").command(plan(nodes=2, devices=2, gpus=True, cpus_per_process=4), env)
    at = gpu_argv.index("plm_slurm_args")
    assert gpu_argv[at - 1] in ("--mca", "--prtemca") and gpu_argv[at + 1] == "--cpus-per-task=8 --gres=gpu:2"
    cpu_argv, _ = cluster.get("mpirun").command(plan(nodes=2, devices=2, threads_per_process=3), env)
    assert cpu_argv[cpu_argv.index("plm_slurm_args") + 1] == "--cpus-per-task=6"
    # Outside Slurm mpirun starts its daemons itself.
    assert "plm_slurm_args" not in cluster.get("mpirun").command(plan(gpus=True), {})[0]


def test_a_slurm_launch_of_auto_asks_for_what_the_profiles_site_declares(tmp_path):
    """The ranks' step gets what the workflow's sbatch request was sized from: auto resolved by
    site.accelerator, site.cpus_per_gpu cores per GPU rank (the run's own threads stay its threads)."""
    run_yaml, manifest, run_dir = prepare(tmp_path, {"launch": {"accelerator": "auto", "devices": 2}})
    paths = ["--config", str(run_yaml), "--run-dir", str(run_dir), "--data", str(manifest)]
    args = launch.parse_args(["--platform", "slurm", *paths])
    env = {**JOBSTEP_ENV, "SNAKEDDP_PLATFORM": "slurm"}
    site = '{"accelerator": "gpu", "cpus_per_gpu": 4}'
    _, argv, child_env = launch.build(args, {**env, "SNAKEDDP_SITE": site})
    assert {"--gres=gpu:2", "--cpus-per-task=4"} <= set(argv) and child_env["OMP_NUM_THREADS"] == "1"
    _, argv, _ = launch.build(args, {**env, "SNAKEDDP_SITE": '{"accelerator": "cpu", "cpus_per_gpu": 4}'})
    assert "--cpus-per-task=1" in argv and not any(a.startswith("--gres") for a in argv)


def test_mpirun_keeps_an_allocation_it_can_see():
    env = {**JOBSTEP_ENV, "SLURM_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_CONF": "/etc/slurm.conf"}
    _, exports = cluster.get("mpirun").command(plan(nodes=2, devices=2), env)
    assert "SLURM_NODELIST" not in exports and "SLURM_CONF" not in exports


@pytest.mark.parametrize(
    ("launcher", "env", "rank_var"), [("torchrun", TORCHRUN, "RANK"), ("srun", SRUN, "SLURM_PROCID")]
)
def test_lightnings_own_environment_must_agree_with_the_layout(launcher, env, rank_var):
    """torchrun and srun hand Lightning its own environment, which reads the variables itself."""
    env = {**env, "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400"}
    layout = cluster.get(launcher).layout(env)
    with mock.patch.dict(os.environ, env, clear=True):
        assert cluster.get(launcher).lightning_environment(layout).global_rank() == layout.rank
    with mock.patch.dict(os.environ, {**env, rank_var: "0"}, clear=True), pytest.raises(LaunchError, match="HINT:"):
        cluster.get(launcher).lightning_environment(layout)
