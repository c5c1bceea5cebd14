# Config validation, the run grid and input functions. Logic lives in src/snakeddp.
import json
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
# The azureml profile's train jobs read the azureml: section from here: it is not part of any
# run's config, so editing it never retrains a finished run.
if PLATFORM == "azureml":
    os.environ.update(SNAKEDDP_AZUREML_CONFIG=json.dumps(CONFIG["azureml"]))


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
