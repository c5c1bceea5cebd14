"""The invocation as the workflow reads it, once: the Snakefile's ``PLAN``.

``read`` does what the Snakefile did line by line before any rule: the config layered (the file, the
profile's entries, ``--configfile`` and ``--config``, a sweep given on the command line replacing the
file's) and validated, the runs it plans, the search over them, the platform's contract and its
``Invocation``, the site that contract settles, every check a job would only meet later (one line with a
HINT, before any job: ``snakemake -n`` too), and what every job inherits (exported here, once). What it
finds, the rule files read from the ``Plan`` it returns, and from nothing else they do not define
themselves: its fields, and the input functions the train and search rules share (``manifest``,
``run_json``, ``train_threads``, ``train_resources``). A rule file's own input functions stay beside its
rules (data.smk, search.smk, report.smk).

Nothing here imports torch or Lightning: every dry run and every job's Snakemake reads it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from snakeddp import config as configuration
from snakeddp import platforms
from snakeddp.compat import snakemake as snakemake_compat
from snakeddp.config import coerce, layers, monitor, parts, site, sources
from snakeddp.config import schema as config_schema
from snakeddp.contract import Invocation, Platform
from snakeddp.data import names as data_names
from snakeddp.data import plan as data_plan
from snakeddp.data import stream as data_stream
from snakeddp.environment import advisories
from snakeddp.environment import files as envfiles
from snakeddp.platforms.table import Row
from snakeddp.report import configurations as report_configurations
from snakeddp.report.files import workflow_files
from snakeddp.run import rungs
from snakeddp.run import search as searching
from snakeddp.run.layout import RunPaths
from snakeddp.run.runfile import keep_scheduler_requests, rewrites
from snakeddp.util import gpus, hashing, redact
from snakeddp.workflow import jobenv, preflight
from snakeddp.workflow.paramfile import param_file

#: A run's files, by run id: where the train rule writes its record (the run is finished once it exists).
PROVENANCE = str(RunPaths.under("results", "{run}").provenance)
RUN_FILE = str(RunPaths.under("results", "{run}").run_file)
#: A run's record at a search rung's budget (rule search_train).
RUNG_RECORD = "results/search/{run}/epochs-{epochs}.json"
#: A cache of what the plan checks only when its inputs changed (the tables' hashes are data.identity.CACHE's).
TARGETS_CACHE = Path(".snakemake/snakeddp/targets.json")
#: Deployments whose jobs run in an environment of their own (not Snakemake's interpreter).
OWN_ENVIRONMENTS = frozenset({"CONDA", "APPTAINER"})


@dataclass
class Plan:
    """What one invocation of the workflow is: read once by ``read``, asked by every rule file."""

    repo: Path  # the checkout (workflow.basedir)
    typed: bool  # the invocation the user typed, not the Snakemake a job runs inside
    config: dict[str, Any]  # validated; its site settled by the platform
    runs: dict[str, dict[str, Any]]  # every run the config plans
    search: searching.Plan | None  # the search over the runs' configurations, or None
    row: Row  # the profile's platform's row
    contract: Platform  # and its contract
    invocation: Invocation  # what every hook of the contract is handed
    deployment: frozenset[str]  # --sdm's methods (CONDA, APPTAINER)
    config_files: list[str]  # the config files given, for the report's crate
    lock_file: str  # the lock the environment records hash
    lock_sha256: str
    site: parts.Site  # the site section the platform settled, built once
    tracking: parts.Tracking  # the trackers rank 0 reports to (preflight asks for their server)
    launches: dict[str, parts.Launch] = field(default_factory=dict)  # each run's launch part, built once
    data: dict[str, parts.Data] = field(default_factory=dict)  # each run's data part (its table resolved)
    datasets: dict[str, dict[str, Any]] = field(default_factory=dict)  # dataset id -> its data section
    search_groups: dict[str, list[str]] = field(default_factory=dict)  # configuration id -> its runs (seeds)

    # What the rule files read of the config.
    @property
    def report(self) -> dict[str, Any]:
        """Report settings, not part of any run: changing them reruns only the report jobs."""
        return self.config["report"]

    @property
    def export(self) -> bool:
        """Whether each run's best model is exported for the report (rule export)."""
        return bool(self.report.get("export"))

    @property
    def container_image(self) -> str | None:
        """The image of ``--sdm apptainer`` (environment.image); the rules run in the stage envs otherwise."""
        return self.config["environment"]["image"]

    @property
    def in_container(self) -> bool:
        return "APPTAINER" in self.deployment

    @property
    def train_conda_env(self) -> str:
        """The conda env of the stages that import torch: one YAML per torch build (environment.cuda),
        relative to rules/, where the rules naming it are."""
        return self.conda_env("train")

    def conda_env(self, stage: str) -> str:
        return f"../envs/{envfiles.stage_file(stage, self.config['environment']['cuda'])}"

    @property
    def scaling(self) -> bool:
        """Whether the runs differ in world size: only then does a scaling figure mean something."""
        return len({launch.nodes * launch.devices for launch in self.launches.values()}) > 1

    @property
    def workflow_files(self) -> list[str]:
        """What the report's RO-Crate carries of the workflow itself."""
        return [str(path) for path in workflow_files(self.repo)]

    def run_dir(self, run: str) -> Path:
        return Path(PROVENANCE.format(run=run)).parent

    # The data rules' inputs and parameters (rules/data.smk).
    def dataset_params(self, wildcards: Any) -> dict[str, Any]:
        """Parameters that shape a dataset's bytes (for synthetic data, not how many partitions exist)."""
        return sources.identity(self.datasets[wildcards.dataset])

    def dataset_params_json(self, wildcards: Any) -> str:
        """The dataset's parameters as the data rules' steps read them: a file, whose short path is what a failed
        job's "shell:" line shows (a table's JSON, every feature named, filled it with hundreds of columns)."""
        return param_file(json.dumps(self.dataset_params(wildcards), sort_keys=True))

    def table_files(self, wildcards: Any) -> list[str]:
        return data_plan.input_files(self.datasets[wildcards.dataset])

    def dataset_pattern(self, *, table: bool) -> str:
        """A wildcard constraint: the planned datasets' ids of a table (``table``: data_table writes every file
        of theirs) or of any other source (data_partition and data_val write theirs); none matches ``(?!)``."""
        ids = [dataset for dataset, data in self.datasets.items() if (data["source"] == "table") == table]
        return "|".join(map(re.escape, sorted(ids))) or "(?!)"

    def partition_entries(self, wildcards: Any) -> str | list[str]:
        """The manifest's train partitions: a table's ingestion folder (its P partitions, the only count its
        dataset has), else each partition's entry."""
        data = self.datasets[wildcards.dataset]
        if data["source"] == "table" and int(wildcards.parts) == data["num_train_files"]:
            return f"results/data/{wildcards.dataset}/{data_names.TRAIN}"
        dataset = f"results/data/{wildcards.dataset}"
        return [f"{dataset}/{data_names.train_partition(i)}.json" for i in range(int(wildcards.parts))]

    def stage_conda_env(self, wildcards: Any) -> str:
        """The conda env of the stage whose environment rule env_capture records."""
        return self.conda_env(wildcards.stage)

    # The input functions the train and search rules share.
    def launch(self, wildcards: Any) -> parts.Launch:
        return self.launches[wildcards.run]

    def manifest(self, wildcards: Any) -> str:
        """The manifest of exactly the partitions the run trains on (or its DataModule's record)."""
        data = self.data[wildcards.run]
        dataset = configuration.dataset_id(self.runs[wildcards.run]["config"]["data"])
        if data.source == "module":
            return f"results/data/{dataset}/module.json"
        if data.source == "table":  # a windowed table's runs start beside its ingestion (snakeddp.data.stream)
            params = sources.identity(self.datasets[dataset])
            return data_stream.train_input(dataset, params, data.num_train_files, self.row.name)
        return f"results/data/{dataset}/manifest-{data.num_train_files}.json"

    def streamed_manifests(self, checkpoints: Any) -> list[str]:
        """The manifests that the report reads and no train job waited for (their runs started on a stream's)."""
        found = (
            data_stream.manifest_of_stream(self.manifest(SimpleNamespace(run=run)))
            for run in self.report_runs(checkpoints)
        )
        return sorted({path for path in found if path})

    def run_json(self, wildcards: Any) -> str:
        """The run as run.yaml holds it; scheduler requests alone never rewrite it (runfile). Its JSON is
        the rerun key, and its step gets it as a file (snakeddp.workflow.paramfile)."""
        run = keep_scheduler_requests(self.runs[wildcards.run], RUN_FILE.format(run=wildcards.run))
        return param_file(json.dumps(run, sort_keys=True))

    def accelerator(self, wildcards: Any) -> str:
        """The run's accelerator where it runs: auto resolved by the profile's site (snakeddp.config.site)."""
        return site.resolved(self.launch(wildcards), self.row.name, self.site)

    def train_threads(self, wildcards: Any) -> int:
        launch = self.launch(wildcards)
        return launch.devices * launch.threads_per_process

    def train_resources(self) -> dict[str, Callable[[Any], Any]]:
        """The scheduler's resources of a job that trains a run (rules train and search_train): the portable
        ones, and what the platform's contract adds (snakeddp.contract: ``resources``)."""
        return {
            "nodes": lambda wc: self.launch(wc).nodes,
            # Sized per GPU rank unless launch.mem_mb says otherwise (site.mem_mb_per_gpu).
            "mem_mb": lambda wc: site.mem_mb(self.launch(wc), self.accelerator(wc), self.site),
            "runtime": lambda wc: self.launch(wc).runtime,
            **self.contract.resources(self.invocation, self.launch, self.accelerator),
        }

    # The search (search:, rules/search.smk): which runs each rung trains and where their records are.
    def search_runs(self, rung: int, checkpoints: Any) -> list[str]:
        """The runs rung ``rung`` trains: every configuration's at rung 0, then the ones the rung before
        promoted (its decision is a checkpoint: Snakemake asks again once it exists)."""
        if rung == 0:
            promoted = list(self.search_groups)
        else:
            decision = checkpoints.search_rung.get(rung=rung - 1).output.decision
            promoted = searching.survivors(rungs.read_decision(decision))
        # A configuration the sweep no longer has is not trained; the rung's decision is made again.
        return [run for cid in promoted if cid in self.search_groups for run in self.search_groups[cid]]

    def search_record(self, run: str, rung: int) -> str:
        """Where a run's record at a rung is: the top rung trains the run's whole budget (rule train)."""
        assert self.search is not None
        if rung == self.search.top:
            return PROVENANCE.format(run=run)
        return RUNG_RECORD.format(run=run, epochs=self.search.budgets[rung])

    def rung_records(self, wildcards: Any, checkpoints: Any) -> list[str]:
        """The records a rung's decision ranks: its runs' at the rung's budget."""
        assert self.search is not None
        rung = int(wildcards.rung)
        if rung > self.search.top:
            preflight.stop(
                f"search: rung {rung} is beyond the plan's last rung ({self.search.top}). HINT: ask for "
                "results/search/rung-<k>.json with k up to the last rung, or for the report."
            )
        return [self.search_record(run, rung) for run in self.search_runs(rung, checkpoints)]

    def search_plan_json(self, wildcards: Any) -> str:
        """The search's plan and its configurations, as the rungs' parameter."""
        assert self.search is not None
        return param_file(searching.plan_json(self.search, self.search_groups))

    # The report rule's inputs and parameters (rules/report.smk).
    def report_runs(self, checkpoints: Any) -> list[str]:
        """The runs the report shows: every run, or those a search trained to its top rung."""
        return self.search_runs(self.search.top, checkpoints) if self.search else list(self.runs)

    @property
    def crate_config(self) -> dict[str, Any]:
        """The config the crate records, without platform (each run's provenance says where it ran), so the
        same config on another profile does not rerun the report. Credentials in it (a tracking URI's
        user:password@) are masked: a rule's params are stored in .snakemake/metadata and printed when they
        change. It stays a mapping inside the report's parameter, so a rerun's reason names the key that
        changed (workflow.reasons), not the whole config."""
        return redact.scrub({key: value for key, value in self.config.items() if key != "platform"})

    @property
    def tuned(self) -> list[str]:
        """The swept keys, seed aside, that take several numbers: the monitored metric is plotted against each."""
        return report_configurations.numeric_keys([run["point"] for run in self.runs.values()])

    def report_json(self, wildcards: Any) -> str:
        """The report's settings, the config its crate records and the config files, as one parameter
        (snakeddp.report.job): its rerun key."""
        settings = {"settings": self.report, "config": self.crate_config, "configfiles": self.config_files}
        return param_file(json.dumps(settings, sort_keys=True))

    @staticmethod
    def report_files(wildcards: Any, input: Any, output: Any) -> str:
        """The report job's inputs and outputs by name (an output the workflow does not make is empty), as a
        second parameter file. Derived from them, it is no rerun key of its own (Snakemake leaves such
        parameters out: persistence's non_derived_params); a change of them is an input or output change."""

        def one(files: Any) -> str:
            return str(files[0]) if isinstance(files, list) and files else str(files or "")

        named = {
            "inputs": {name: [str(f) for f in input[name]] for name in input.keys()},
            "outputs": {name: one(output[name]) for name in output.keys()},
        }
        return param_file(json.dumps(named, sort_keys=True))

    def runs_to_train(self) -> dict[str, dict[str, Any]]:
        """The planned runs this invocation trains: those without a provenance.json yet, and those whose config
        changed since (their run.yaml is written anew, and their train job runs: a dry run's notes and the
        checks before the first job cover them too)."""
        return {
            run: planned
            for run, planned in self.runs.items()
            if not Path(PROVENANCE.format(run=run)).exists() or rewrites(planned, RUN_FILE.format(run=run))
        }


def read(workflow: Any, config: dict[str, Any], *, typed: bool, say: Callable[[str], None]) -> Plan:
    """The plan of this invocation, from Snakemake's ``workflow`` and ``config`` (the file's, with the
    profile's entries and --configfile's merged by Snakemake). A problem stops the workflow in one line
    (snakeddp.workflow.preflight.stop), before any job."""
    try:
        return _read(workflow, config, typed=typed, say=say)
    except configuration.ConfigError as error:
        preflight.stop(error)


def _read(workflow: Any, config: dict[str, Any], *, typed: bool, say: Callable[[str], None]) -> Plan:
    repo = Path(workflow.basedir)
    validated, runs = _validated(workflow, config)
    # Tables enter dataset ids by checksum, so a changed table is a new dataset. The files' hashes are kept in
    # data.identity.CACHE, where ingestion finds those of the files unchanged since.
    data_plan.resolve_tables(runs)
    search = searching.plan(validated, runs)
    name = validated["platform"]
    row, contract = platforms.row(name), platforms.load(name)
    deployment = frozenset(method.name for method in workflow.deployment_settings.deployment_method)
    launches = {run_id: parts.Launch.of(run["config"]["launch"]) for run_id, run in runs.items()}
    invocation = Invocation(
        config=validated,
        declared=config,
        runs=runs,
        typed=typed,
        resources=workflow.resource_settings,
        train_rules=("train", "search_train") if search else ("train",),
        say=say,
        # A global resource the platform's own pools count (the local platform's GPUs).
        provide=workflow.register_resource,
        same_interpreter=not deployment & OWN_ENVIRONMENTS,
        in_container="APPTAINER" in deployment,
        state=contract.new_state(),
        # The parts the platform reads (the site once it settled it: _settle), built once here.
        site=parts.Site.of(validated["site"]),
        launches=launches,
        trainers={run_id: parts.Trainer.of(run["config"]["trainer"]) for run_id, run in runs.items()},
        settings=config_schema.settings_part(row).of(validated[row.section]) if row.section else None,
    )
    _no_retry_of_refused_runs(invocation)
    # Every process's wait for NVML's answer (util.gpus): a bad one is refused here, in one line, before any waits.
    gpus.nvml_timeout_s()
    # The GPU checks below read the declaration as the jobs will, after the export (environment.cuda_forward_compat).
    os.environ.update(jobenv.forward_compat(validated))
    _settle(validated, contract, invocation)
    # The lock the environment records hash (environment.lock, else this checkout's). Its content
    # is a parameter of env_capture (a checksum: no rerun when only its mtime or path changes); its
    # path reaches the job through the environment.
    lock_file = validated["environment"]["lock"] or str(repo / "envs" / "requirements.lock")
    _check_before_jobs(invocation, name, deployment, lock_file, repo / "envs")
    plan = Plan(
        repo=repo,
        typed=typed,
        config=validated,
        runs=runs,
        search=search,
        row=row,
        contract=contract,
        invocation=invocation,
        deployment=deployment,
        config_files=[str(Path(path).resolve()) for path in workflow.configfiles],
        lock_file=lock_file,
        lock_sha256=hashing.sha256_file(lock_file),
        site=invocation.site,
        tracking=parts.Tracking.of(validated["tracking"]),
        launches=launches,
        data={run_id: parts.Data.of(run["config"]["data"]) for run_id, run in runs.items()},
        datasets={configuration.dataset_id(run["config"]["data"]): run["config"]["data"] for run in runs.values()},
        search_groups=searching.configurations(runs) if search else {},
    )
    _export_for_jobs(validated, repo, deployment, lock_file)
    return plan


def _validated(workflow: Any, config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The config with --configfile and --config laid over it, validated, and the runs its sweep makes."""
    # Snakemake hands nested --config values over as strings (trainer='{max_epochs: 3}' gives '3'):
    # they take the type the schema asks for before the config is validated.
    command_line = coerce.command_line(workflow.config_settings.config, configuration.load_schema())
    _update(config, command_line)
    # A sweep given with --configfile or --config replaces config/config.yaml's whole, where Snakemake
    # would add the file's swept keys to it (snakeddp.config.layers).
    given = [*map(layers.load_layer, workflow.config_settings.configfiles), command_line]
    layers.replace_sweep(config, given)
    # An empty mapping typed (--config 'model={kwargs: {}}') empties the file's, which Snakemake's merge kept.
    layers.replace_emptied(config, given)
    # A null typed for a key of model.kwargs (or another free-form mapping) removes the file's key.
    layers.remove_nulled(config, command_line)
    # A metric named in a --configfile takes config/config.yaml's mode (min) unless it says its own.
    base = Path(workflow.basedir) / "config" / "config.yaml"
    unchosen = monitor.rising_without_mode([layers.load_layer(base) if base.is_file() else {}, *given])
    if unchosen:
        raise monitor.mode_error(*unchosen, "config")
    validated = configuration.validate(config, source="config")
    layers.check_not_swept(command_line, validated["sweep"])
    return validated, configuration.expand_sweep(validated, source="config")


def _no_retry_of_refused_runs(invocation: Invocation) -> None:
    # A train job whose ranks the machine refused (torch's build against the GPU or driver, MIG, the
    # precision) is not retried: every attempt on such nodes would be refused again (MachineRefusal).
    snakemake_compat.no_retry_when(
        lambda rule, wildcards: (
            rule in invocation.train_rules and RunPaths.under("results", wildcards["run"]).refused.exists()
        )
    )


def _settle(validated: dict[str, Any], contract: Platform, invocation: Invocation) -> None:
    """What the platform's nodes have joins the site section; keys that are off leave the config."""
    # On Slurm, launch.accelerator: auto is asked of the training partition's nodes once; every job and rank
    # gets the site section.
    validated["site"] = contract.settle_site(invocation)
    invocation.site = parts.Site.of(validated["site"])
    # Off, the export key leaves the config the report records (its params), so a pipeline finished
    # before the key existed stays done; an unset experiment likewise.
    if not validated["report"]["export"]:
        del validated["report"]["export"]
    if validated["experiment"] is None:
        del validated["experiment"]


def _check_before_jobs(
    invocation: Invocation, name: str, deployment: frozenset[str], lock_file: str, envs: Path
) -> None:
    """What a job would only fail on later stops here in one line, before any job runs (`snakemake -n` too)."""
    validated = invocation.config
    # The profile, launcher, strategy, packages, user classes, cores and files.
    preflight.check_workflow(invocation, name, lock=Path(lock_file), cache=TARGETS_CACHE)
    if "APPTAINER" in deployment and not validated["environment"]["image"]:
        raise preflight.PreflightError(
            "--sdm apptainer needs an image, and environment.image is null. HINT: build envs/Dockerfile "
            "(snakemake build_image, or docker build -f envs/Dockerfile .), push it, and set "
            "environment.image: docker://REGISTRY/snakeddp:TAG in your config (docs/environments.md)."
        )
    # A torch build whose lock holds no hashes cannot be installed (its YAML's pip requires them): with
    # --sdm conda the workflow stops in one line before any job, instead of pip failing in the first env; so
    # does a release envs/denied.toml denies in a YAML the rules' envs are made from (a lock edited by hand or by
    # a merge, then written out), in one line naming its advisory. Both read the rules' envs/.
    if "CONDA" in deployment:
        cuda = validated["environment"]["cuda"]
        envfiles.locked_build(cuda, envs)
        advisories.refuse_denied([envs / envfiles.stage_file(stage, cuda) for stage in envfiles.STAGE_PACKAGES])


def _export_for_jobs(validated: dict[str, Any], repo: Path, deployment: frozenset[str], lock_file: str) -> None:
    # What every job inherits (locally and through sbatch): this checkout's package, the profile's
    # platform (how snakeddp.launch starts processes; deliberately not a rule parameter, so moving a
    # finished run between profiles does not retrain it), the lock's path, network tuning and trackers,
    # the platform's section and what its contract adds and, unless a conda env or container provides
    # its own, the interpreter Snakemake runs under as `python`. None of it is part of a run's identity,
    # so changing it never reruns a job.
    os.environ.update(
        jobenv.exports(
            validated,
            os.environ,
            src=str(repo / "src"),
            lock_file=lock_file,
            python_bin=None if deployment & OWN_ENVIRONMENTS else str(Path(sys.executable).parent),
            checkout=repo,
        )
    )


def _update(config: dict[str, Any], overwrite: Mapping[str, Any]) -> None:
    """``config`` with ``overwrite`` merged in key by key, as Snakemake's own update_config does."""
    from snakemake.utils import update_config

    update_config(config, overwrite)
