# Config validation, the run grid and input functions. Logic lives in src/snakeddp.
import json
import os
import sys
from pathlib import Path

REPO = Path(workflow.basedir)
SRC = str(REPO / "src")
sys.path.insert(0, SRC)

from snakeddp import config as snakeddp_config
from snakeddp import errors as snakeddp_errors
from snakeddp.util import hashing as snakeddp_hashing
from snakeddp.report.files import workflow_files
from snakeddp.workflow import jobenv as snakeddp_jobenv
from snakeddp.util import terminal as snakeddp_terminal
from snakeddp.warm import preload as snakeddp_warm_preload
from snakeddp.warm import process as snakeddp_warm
from snakeddp.run.runfile import keep_scheduler_requests
from snakeddp.config import sources as snakeddp_sources
from snakeddp.data import plan as snakeddp_data_plan
from snakeddp.config import coerce as snakeddp_coerce
from snakeddp.config import layers as snakeddp_layers
from snakeddp.config import site as snakeddp_site
from snakeddp.config import parts as snakeddp_parts
from snakeddp.util import shutdown as snakeddp_shutdown
from snakeddp.util import redact as snakeddp_redact
from snakeddp.run import layout as snakeddp_layout
from snakeddp.workflow import preflight as snakeddp_preflight
from snakeddp.compat import snakemake as snakeddp_snakemake
from snakeddp.workflow import reasons as snakeddp_reasons
from snakeddp.workflow import interrupt as snakeddp_interrupt
from snakeddp.workflow import envrecords as snakeddp_envrecords
from snakeddp.workflow.paramfile import param_file
from snakeddp.workflow import live as snakeddp_live
from snakeddp import platforms as snakeddp_platforms
from snakeddp.platforms.contract import Invocation as SnakeddpInvocation
from snakeddp.run import attempt as snakeddp_attempt
from snakeddp.run import rules as snakeddp_rules
from snakeddp.run import search as snakeddp_search
from snakeddp.environment.image import RECORD as IMAGE_RECORD
from snakeddp.environment import files as snakeddp_envfiles
from snakemake.logging import logger
from snakemake.utils import update_config

# A rerun's reason names the config keys that changed, not the run's whole config.
snakeddp_snakemake.name_params_changes(snakeddp_reasons.describe)
# Ctrl-C: a few lines saying what was kept, not each stopped job as a failure (onerror).
if TYPED_INVOCATION:
    snakeddp_interrupt.watch_ctrl_c()

# Snakemake hands nested --config values over as strings (trainer='{max_epochs: 3}' gives '3'):
# they take the type the schema asks for before the config is validated.
COMMAND_LINE = snakeddp_coerce.command_line(
    workflow.config_settings.config, snakeddp_config.load_schema()
)
update_config(config, COMMAND_LINE)
try:
    # A sweep given with --configfile or --config replaces config/config.yaml's whole, where
    # Snakemake would add the file's swept keys to it (snakeddp.config.layers).
    snakeddp_layers.replace_sweep(
        config,
        [
            *map(snakeddp_layers.load_layer, workflow.config_settings.configfiles),
            COMMAND_LINE,
        ],
    )
    CONFIG = snakeddp_config.validate(config, source="config")
    RUNS = snakeddp_config.expand_sweep(CONFIG, source="config")
    # Tables enter dataset ids by checksum, so a changed table is a new dataset.
    snakeddp_data_plan.resolve_tables(RUNS)
    # The search over RUNS' configurations (search:), or None: then every run trains its whole budget.
    SEARCH = snakeddp_search.plan(CONFIG, RUNS)
except snakeddp_config.ConfigError as error:
    snakeddp_preflight.stop(error)

PLATFORM = CONFIG["platform"]
# The profile's platform: its row of snakeddp.platforms and its contract, which the workflow asks
# everything a platform decides (its checks, what its jobs inherit, what it does when jobs start).
PLATFORM_ROW = snakeddp_platforms.row(PLATFORM)
PLATFORM_CONTRACT = snakeddp_platforms.load(PLATFORM)
INVOCATION = SnakeddpInvocation(
    config=CONFIG,
    declared=config,
    runs=RUNS,
    typed=TYPED_INVOCATION,
    resources=workflow.resource_settings,
    train_rules=("train", "search_train") if SEARCH else ("train",),
    say=logger.error,
)
# What the platform's nodes have (on Slurm, launch.accelerator: auto asked of the training
# partition's nodes once) joins the site section every job and rank gets.
try:
    CONFIG["site"] = PLATFORM_CONTRACT.settle_site(INVOCATION)
except snakeddp_config.ConfigError as error:
    snakeddp_preflight.stop(error)
DEPLOYMENT = {m.name for m in workflow.deployment_settings.deployment_method}
# What the report's RO-Crate carries: the workflow's own files and the config files given.
WORKFLOW_FILES = [str(path) for path in workflow_files(REPO)]
CONFIG_FILES = [str(Path(path).resolve()) for path in workflow.configfiles]
# Whether each run's best model is exported for the report (rule export). Off, the key leaves the
# config the report records (its params), so a pipeline finished before the key existed stays done.
EXPORT = CONFIG["report"]["export"]
if not EXPORT:
    del CONFIG["report"]["export"]
# experiment names runs (their ids carry it); unset, it stays out of the config the report records too.
if CONFIG["experiment"] is None:
    del CONFIG["experiment"]
# Report settings are not part of any run: changing them reruns only the report jobs.
REPORT = CONFIG["report"]
# A scaling figure only makes sense when the runs differ in world size.
SCALING = (
    len(
        {
            run["config"]["launch"]["nodes"] * run["config"]["launch"]["devices"]
            for run in RUNS.values()
        }
    )
    > 1
)
# The lock the environment records hash (environment.lock, else this checkout's). Its content
# is a parameter of env_capture (a checksum: no rerun when only its mtime or path changes); its
# path reaches the job through the environment.
LOCK_FILE = CONFIG["environment"]["lock"] or str(REPO / "envs" / "requirements.lock")
# What a job would only fail on later (profile, launcher, strategy, packages, user classes,
# cores, files) stops here in one line, before any job runs; `snakemake -n` shows it too.
try:
    snakeddp_preflight.check_workflow(
        config,
        CONFIG,
        RUNS,
        PLATFORM,
        lock=Path(LOCK_FILE),
        same_interpreter=not DEPLOYMENT & {"CONDA", "APPTAINER"},
        cache=Path(".snakemake/snakeddp/targets.json"),
        in_container="APPTAINER" in DEPLOYMENT,
    )
except snakeddp_config.ConfigError as error:
    snakeddp_preflight.stop(error)
LOCK_SHA256 = snakeddp_hashing.sha256_file(LOCK_FILE)
# What every job inherits (locally and through sbatch): this checkout's package, the profile's
# platform (how snakeddp.launch starts processes; deliberately not a rule parameter, so moving
# a finished run between profiles does not retrain it), the lock's path, network tuning and
# trackers, the platform's section and what its contract adds and, unless a conda env or container provides
# its own, the interpreter Snakemake runs under as `python`. None of it is part of a run's
# identity, so changing it never reruns a job.
try:
    os.environ.update(
        snakeddp_jobenv.exports(
            CONFIG,
            os.environ,
            src=SRC,
            lock_file=LOCK_FILE,
            python_bin=(
                None
                if DEPLOYMENT & {"CONDA", "APPTAINER"}
                else str(Path(sys.executable).parent)
            ),
            checkout=REPO,
        )
    )
except snakeddp_config.ConfigError as error:
    snakeddp_preflight.stop(error)
# Jobs of the local platform run beside Snakemake: their progress lines (epochs, ingestion, the
# report) also reach its terminal, which otherwise shows a job's output only in the job's log.
# They go through this relay, which writes them with Snakemake's logger, the one writer of its
# output (snakeddp.util.terminal). It listens from onstart (jobs will run) to onsuccess/onerror.
TERMINAL_RELAY = snakeddp_terminal.Relay(logger.info)
# Local jobs are forked from one warm process per invocation (snakeddp.warm), from onstart to the end.
WARM_PROCESS = snakeddp_warm.WarmProcess()
# The image of `--sdm apptainer` (environment.image); rules run in the stage envs otherwise.
CONTAINER_IMAGE = CONFIG["environment"]["image"]
if "APPTAINER" in DEPLOYMENT and not CONTAINER_IMAGE:
    snakeddp_preflight.stop(
        "--sdm apptainer needs an image, and environment.image is null. HINT: build envs/Dockerfile "
        "(snakemake build_image, or docker build -f envs/Dockerfile .), push it, and set "
        "environment.image: docker://REGISTRY/snakeddp:TAG in your config (docs/environments.md)."
    )
# The conda env of the stages that import torch follows environment.cuda (one YAML per torch build);
# the others have one. Relative to rules/, where the rules naming them are.
TRAIN_CONDA_ENV = (
    f"../envs/{snakeddp_envfiles.stage_file('train', CONFIG['environment']['cuda'])}"
)


def get_conda_env(wildcards):
    return f"../envs/{snakeddp_envfiles.stage_file(wildcards.stage, CONFIG['environment']['cuda'])}"


container: CONTAINER_IMAGE


DATASETS = {
    snakeddp_config.dataset_id(run["config"]["data"]): run["config"]["data"]
    for run in RUNS.values()
}

from snakeddp.slurm.resources import slurm_resources


wildcard_constraints:
    run=snakeddp_layout.RUN_ID_PATTERN,
    dataset=r"[A-Za-z0-9][A-Za-z0-9_.-]*-[0-9a-f]{10}",
    index=r"\d{5}",
    parts=r"\d+",
    stage=r"data|train|report",
    epochs=r"[1-9]\d*",
    rung=r"\d+",


def get_dataset_params(wildcards):
    """Parameters that shape a dataset's bytes (for synthetic data, not how many partitions exist)."""
    return snakeddp_sources.identity(DATASETS[wildcards.dataset])


def get_dataset_params_json(wildcards):
    return json.dumps(get_dataset_params(wildcards), sort_keys=True)


def get_table_files(wildcards):
    return snakeddp_data_plan.input_files(DATASETS[wildcards.dataset])


def get_ingested(wildcards):
    """A table dataset's partitions come from its one ingestion pass; synthetic ones need nothing."""
    if DATASETS[wildcards.dataset]["source"] != "table":
        return []
    return f"results/data/{wildcards.dataset}/ingest"


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
    if data["source"] == "module":
        return f"results/data/{dataset}/module.json"
    return f"results/data/{dataset}/manifest-{data['num_train_files']}.json"


def get_run_json(wildcards):
    """The run as run.yaml holds it; scheduler requests alone never rewrite it (runfile). Its JSON is
    the rerun key, and its step gets it as a file (snakeddp.workflow.paramfile)."""
    run = keep_scheduler_requests(
        RUNS[wildcards.run], f"results/runs/{wildcards.run}/run.yaml"
    )
    return param_file(json.dumps(run, sort_keys=True))


# Each run's launch part, built once: the train rule's resources read it a dozen times per job.
LAUNCHES = {
    run_id: snakeddp_parts.Launch.of(run["config"]["launch"])
    for run_id, run in RUNS.items()
}


def get_launch(wildcards):
    return LAUNCHES[wildcards.run]


def get_runs_to_train():
    """The planned runs without a provenance.json yet: those this invocation trains."""
    return {
        run: RUNS[run]
        for run in RUNS
        if not Path(rules.train.output.provenance.format(run=run)).exists()
    }


def get_accelerator(wildcards):
    """The run's accelerator where it runs: auto resolved by the profile's site (snakeddp.config.site)."""
    return snakeddp_site.resolved(get_launch(wildcards), PLATFORM, CONFIG["site"])


def get_train_threads(wildcards):
    launch = get_launch(wildcards)
    return launch.devices * launch.threads_per_process


def get_slurm_tasks(wildcards):
    """The train rule's Slurm tasks, CPUs and GPUs (snakeddp.slurm.resources)."""
    return slurm_resources(
        get_launch(wildcards), get_accelerator(wildcards), CONFIG["site"]
    )


# The Slurm/scheduler resources of a job that trains a run (rules train and search_train).
TRAIN_RESOURCES = dict(
    nodes=lambda wc: get_launch(wc).nodes,
    # Sized per GPU rank unless launch.mem_mb says otherwise (site.mem_mb_per_gpu).
    mem_mb=lambda wc: snakeddp_site.mem_mb(
        get_launch(wc), get_accelerator(wc), CONFIG["site"]
    ),
    runtime=lambda wc: get_launch(wc).runtime,
    # Slurm (profiles/slurm): one task per training process, CPUs and GPUs per rank.
    mpi=lambda wc: get_slurm_tasks(wc)["mpi"],
    tasks_per_node=lambda wc: get_slurm_tasks(wc)["tasks_per_node"],
    tasks=lambda wc: get_slurm_tasks(wc)["tasks"],
    tasks_per_gpu=lambda wc: get_slurm_tasks(wc)["tasks_per_gpu"],
    cpus_per_task=lambda wc: get_slurm_tasks(wc)["cpus_per_task"],
    gres=lambda wc: get_slurm_tasks(wc)["gres"],
)

# Search (search:, rules/search.smk): which runs each rung trains and where their records are.
# Configuration id -> its runs (one per seed); the search's plan as the rungs' parameter.
SEARCH_GROUPS = snakeddp_search.configurations(RUNS) if SEARCH else {}
SEARCH_PLAN_JSON = snakeddp_search.plan_json(SEARCH, SEARCH_GROUPS) if SEARCH else ""


def search_runs(rung):
    """The runs rung ``rung`` trains: every configuration's at rung 0, then the ones the rung
    before promoted (its decision is a checkpoint: Snakemake asks again once it exists).
    """
    if rung == 0:
        promoted = list(SEARCH_GROUPS)
    else:
        decision = checkpoints.search_rung.get(rung=rung - 1).output.decision
        promoted = snakeddp_search.survivors(snakeddp_search.read_decision(decision))
    # A configuration the sweep no longer has is not trained; the rung's decision is made again.
    return [
        run for cid in promoted if cid in SEARCH_GROUPS for run in SEARCH_GROUPS[cid]
    ]


def search_record(run, rung):
    """Where a run's record at a rung is: the top rung trains the run's whole budget (rule train)."""
    if rung == SEARCH.top:
        return rules.train.output.provenance.format(run=run)
    return rules.search_train.output.record.format(run=run, epochs=SEARCH.budgets[rung])


def get_rung_records(wildcards):
    rung = int(wildcards.rung)
    if rung > SEARCH.top:
        snakeddp_preflight.stop(
            f"search: rung {rung} is beyond the plan's last rung ({SEARCH.top}). HINT: ask for "
            "results/search/rung-<k>.json with k up to the last rung, or for the report."
        )
    return [search_record(run, rung) for run in search_runs(rung)]


def get_search_plan_json(wildcards):
    return param_file(SEARCH_PLAN_JSON)


def get_report_runs():
    """The runs the report shows: every run, or those a search trained to its top rung."""
    return search_runs(SEARCH.top) if SEARCH else list(RUNS)


def stop_unless_report_made():
    """`snakemake --report` before the report job ran: one line saying to run the workflow first."""
    try:
        snakeddp_preflight.check_report_made(Path(rules.report.output.html))
    except snakeddp_config.ConfigError as error:
        snakeddp_preflight.stop(error)


# The report's settings, the config its crate records (CRATE_CONFIG, rules/report.smk) and the config
# files, as one parameter (snakeddp.report.job): its rerun key, as the three parameters were.
def get_report_json(wildcards):
    return param_file(
        json.dumps(
            {"settings": REPORT, "config": CRATE_CONFIG, "configfiles": CONFIG_FILES},
            sort_keys=True,
        )
    )


# The report job's inputs and outputs by name (an output the workflow does not make is empty), as a
# second parameter file. Derived from them, it is no rerun key of its own (Snakemake leaves such
# parameters out: persistence's non_derived_params); a change of them is an input or output change.
def get_report_files(wildcards, input, output):
    def one(files):
        return str(files[0]) if isinstance(files, list) and files else str(files or "")

    return param_file(
        json.dumps(
            {
                "inputs": {
                    name: [str(f) for f in input[name]] for name in input.keys()
                },
                "outputs": {name: one(output[name]) for name in output.keys()},
            },
            sort_keys=True,
        )
    )
