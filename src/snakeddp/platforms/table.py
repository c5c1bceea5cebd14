"""The table: one row per platform shipped with snakeddp (snakeddp.platforms says what a row is for, and adds
the rows installed packages register)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    """One platform as the rest of snakeddp sees it."""

    name: str  # the profile's name and the config's platform
    module: str  # its contract: a module whose CONTRACT implements snakeddp.contract.Platform
    default_launcher: str  # what launch.launcher: auto starts the ranks with
    section: str | None = None  # its own config section, which its jobs get (variables.PLATFORM_SECTION)
    # The part its section is read through, "module:Class" (a snakeddp.config.parts.Settings whose schema the
    # config's takes in): with a section, the platform brings its settings, and config/schema.yaml names none.
    settings: str | None = None
    own_launchers: tuple[str, ...] = ()  # launchers that start ranks only on platforms naming them
    only_own_launchers: bool = False  # and this platform starts ranks with no other
    this_machine: bool = False  # jobs and ranks run on the machine Snakemake runs on
    job_side: str | None = None  # its job side: a module whose JOB_SIDE is a snakeddp.platforms.jobside.JobSide
    ranks_as: str | None = None  # a remote job's driver starts the ranks as this platform does
    # Its way to ingest a windowed table on its cluster (snakeddp.data.spread), "module:function" given the
    # dataset's parameters, the output folder and the environment; it ingests itself what it does not spread.
    ingest: str | None = None
    # Where its ranks read a secret, where they do not inherit the environment snakemake runs in (VARIABLE: the
    # variable's name); None: they do (sbatch exports it).
    secrets: str | None = None
    # Where a remote job gets MLflow's user and password, where its spec must not carry them (the tracking URI's
    # user:password@, refused: snakeddp.workflow.preflight); None: where ``secrets`` says.
    tracking_login: str | None = None


TABLE = (
    Row("local", "snakeddp.local.platform", "direct", this_machine=True),
    Row(
        "slurm",
        "snakeddp.slurm.platform",
        "srun",
        own_launchers=("srun",),
        job_side="snakeddp.slurm.jobside",
        ingest="snakeddp.slurm.ingest:ingest",
    ),
    Row(
        "azureml",
        "snakeddp.azureml.platform",
        "env",
        section="azureml",
        settings="snakeddp.azureml.settings:Settings",
        job_side="snakeddp.azureml.jobside",
        secrets="in the workspace's key vault, read by your code with the job's identity",
        tracking_login=(
            "an AzureML job can be given no secret but through that spec, so track to a server the compute reaches "
            "without a password (inside the workspace's network), or set tracking.mlflow.enabled: false"
        ),
    ),
    Row(
        "spark",
        "snakeddp.spark.platform",
        "torchdistributor",
        section="spark",
        settings="snakeddp.spark.settings:Settings",
        own_launchers=("torchdistributor",),
        only_own_launchers=True,
        job_side="snakeddp.spark.jobside",
        ingest="snakeddp.spark.ingest:ingest",
        secrets="as spark.executorEnv.VARIABLE in the cluster's spark-defaults.conf",
    ),
    # A Databricks job's driver runs the ranks as the spark platform does, on the job's cluster, and so a table's
    # ingestion (snakeddp.databricks.ingest: a job whose task runs the ingest step there).
    Row(
        "databricks",
        "snakeddp.databricks.platform",
        "torchdistributor",
        section="databricks",
        settings="snakeddp.databricks.settings:Settings",
        own_launchers=("torchdistributor",),
        only_own_launchers=True,
        job_side="snakeddp.databricks.jobside",
        ranks_as="spark",
        ingest="snakeddp.databricks.ingest:ingest",
        secrets="in a Databricks secret scope, given to the job as {{secrets/<scope>/<key>}}",
        tracking_login=(
            "set spark.executorEnv.MLFLOW_TRACKING_USERNAME and spark.executorEnv.MLFLOW_TRACKING_PASSWORD in "
            "databricks.new_cluster.spark_conf as {{secrets/<scope>/<key>}} references, which the cluster resolves "
            "for the ranks (docs/security.md)"
        ),
    ),
)
