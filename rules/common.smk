# Config validation, the run grid and input functions. Logic lives in src/snakeddp.
import os
import shlex
import sys
from pathlib import Path

REPO = Path(workflow.basedir)
SRC = str(REPO / "src")
LOCK_FILE = str(REPO / "envs" / "requirements.lock")
sys.path.insert(0, SRC)
# Jobs (local, Slurm, conda or container envs) import the same package from this checkout.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (SRC, os.environ.get("PYTHONPATH")) if p
)

from snakeddp import config as snakeddp_config

try:
    CONFIG = snakeddp_config.validate(config, source="config")
    RUNS = snakeddp_config.expand_sweep(CONFIG, source="config")
except snakeddp_config.ConfigError as error:
    raise WorkflowError(str(error)) from None

PLATFORM = CONFIG["platform"]
# The venv's interpreter unless a conda env or container provides its own `python`.
PYTHON = (
    "python"
    if {m.name for m in workflow.deployment_settings.deployment_method}
    & {"CONDA", "APPTAINER"}
    else shlex.quote(sys.executable)
)
DATASETS = {
    snakeddp_config.dataset_id(run["config"]["data"]): run["config"]["data"]
    for run in RUNS.values()
}

from snakeddp.slurm_resources import slurm_resources

# The Slurm jobstep plugin removes SLURM_CONF before it calls srun, so a config outside
# /etc/slurm (tests/slurm/cluster.sh) is lost in every job: keep a copy it leaves alone, and
# put profiles/slurm/bin/srun (which restores it) first on the jobs' PATH.
SLURM_BIN = str(REPO / "profiles" / "slurm" / "bin")
if PLATFORM == "slurm" and os.environ.get("SLURM_CONF"):
    search_path = os.environ.get("PATH", "").split(os.pathsep)
    os.environ.update(
        SNAKEDDP_SLURM_CONF=os.environ.get("SLURM_CONF"),
        PATH=os.pathsep.join(
            search_path if SLURM_BIN in search_path else [SLURM_BIN, *search_path]
        ),
    )


wildcard_constraints:
    run=r"[A-Za-z0-9][A-Za-z0-9_.+-]*",
    dataset=r"[A-Za-z0-9][A-Za-z0-9_.-]*-[0-9a-f]{10}",
    index=r"\d{5}",
    parts=r"\d+",
    stage=r"data|train|report",


def get_dataset_params(wildcards):
    """Parameters that shape a dataset's bytes (not how many partitions exist)."""
    data = DATASETS[wildcards.dataset]
    return {
        k: v
        for k, v in data.items()
        if k not in snakeddp_config.DATA_KEYS_OUTSIDE_IDENTITY
    }


def get_partition_entries(wildcards):
    return [
        f"results/data/{wildcards.dataset}/train/part-{i:05d}.json"
        for i in range(int(wildcards.parts))
    ]


def run_data(run):
    return RUNS[run]["config"]["data"]


def get_manifest(wildcards):
    data = run_data(wildcards.run)
    dataset = snakeddp_config.dataset_id(data)
    return f"results/data/{dataset}/manifest-{data['num_train_files']}.json"


def get_run(wildcards):
    return RUNS[wildcards.run]


def get_launch(wildcards):
    return RUNS[wildcards.run]["config"]["launch"]


def get_train_threads(wildcards):
    launch = get_launch(wildcards)
    return launch["devices"] * launch["threads_per_process"]


def get_slurm_tasks(wildcards):
    """The train rule's Slurm task layout (snakeddp.slurm_resources)."""
    return slurm_resources(get_launch(wildcards))
