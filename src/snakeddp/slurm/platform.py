"""The slurm platform's contract: sbatch and sacct here, what the training partition's nodes have
(launch.accelerator auto settled from Slurm, a run no node holds refused before submission), the
watch over pending jobs from the first job to the end, the nodes a run that hung is submitted again
without, and the Slurm config srun needs in a job.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from snakeddp import cluster, platforms
from snakeddp.config import site
from snakeddp.config.parts import Launch, Site, Trainer
from snakeddp.contract import Invocation, Platform, PreflightError, Runs, note_instead
from snakeddp.slurm import PLATFORM, SLURM_CONF_COPY, accounts, polling
from snakeddp.slurm import mixed as mixed_gpus
from snakeddp.slurm import nodes as slurm_nodes
from snakeddp.slurm import status as slurm_status
from snakeddp.slurm.exclude import Exclusions, where_tried
from snakeddp.slurm.mixed import MixedGpus
from snakeddp.slurm.resources import RESOURCES, slurm_resources
from snakeddp.slurm.watch import PendingWatch
from snakeddp.util import cudabuild

# srun that restores SLURM_CONF, which the jobstep plugin drops (profiles/slurm/bin/srun).
SRUN_BIN = Path("profiles") / "slurm" / "bin"


def check_client(which: Callable[[str], str | None] = shutil.which) -> None:
    # The executor plugin submits with sbatch and watches jobs with sacct (squeue without accounting).
    missing = [" or ".join(names) for names in (("sbatch",), ("sacct", "squeue")) if not any(map(which, names))]
    if missing:
        raise PreflightError(
            f"the slurm profile submits jobs with sbatch and watches them with sacct, and this machine has no "
            f"{' and no '.join(missing)} on PATH. HINT: run snakemake on the cluster's login node (where "
            "`sbatch --version` works), or run here with --profile profiles/local."
        )


def check_container(run_id: str, launch: Launch) -> None:
    """A run under ``--sdm apptainer``: the train rule runs inside the image, which has no Slurm client,
    so a launcher that calls srun there (srun itself, mpirun for its daemons) fails in the job with
    ``srun: not found``. Refused before anything is submitted."""
    launcher = cluster.for_platform(launch.launcher, PLATFORM).name
    if launcher in ("srun", "mpirun"):
        raise PreflightError(
            f"run {run_id}: --sdm apptainer runs the train rule inside the image, which has no Slurm client, so "
            f"launcher {launcher} could not start the ranks (srun: not found). HINT: train on Slurm from the "
            "checkout's .venv (no --sdm) or with --sdm conda."
        )


def parts_of(invocation: Invocation, runs: Runs) -> dict[str, tuple[Launch, Trainer]]:
    """The launch and trainer parts of ``runs``, as the plan built them."""
    return {run_id: (invocation.launches[run_id], invocation.trainers[run_id]) for run_id in runs}


def check_nodes(
    runs: Mapping[str, tuple[Launch, Trainer]],
    site_config: Site,
    declared: Mapping[str, Any],
    nodes: slurm_nodes.TrainingNodes | None,
    build: str | None = None,
) -> None:
    """Each run to train (``runs``: its launch and trainer parts) against the nodes of its partition (``nodes``;
    None inside a job): a job no node can hold, or whose ranks could not run on its GPUs (``build``: torch's
    CUDA build there), would pend for ever or fail after the queue. ``declared``: the site as given, which the
    HINT's --config keeps."""
    if nodes is None or not runs:
        return
    try:
        slurm_nodes.check(
            runs, lambda launch: site.resolved(launch, PLATFORM, site_config), site_config, declared, nodes, build
        )
    except slurm_nodes.SlurmNodesError as error:
        message = str(error)
        if "HINT:" not in message:
            message = (
                f"Slurm did not say what its nodes have ({message}), so no run's request could be checked against "
                "them. HINT: run snakemake where Slurm answers (a login node, where `sinfo` works)."
            )
        raise PreflightError(message) from None


def check_accounts(invocation: Invocation) -> None:
    """The profile's slurm_account against the user's accounts, asked once by the typed invocation before any job
    (snakeddp.slurm.accounts)."""
    if not invocation.typed:
        return
    try:
        accounts.check(invocation.resources, invocation.train_rules)
    except accounts.AccountError as error:
        raise PreflightError(str(error)) from None


@dataclass
class SlurmState:
    nodes: slurm_nodes.TrainingNodes | None = None  # the training partitions' nodes, once asked
    mixed: MixedGpus | None = None  # what GPU train jobs do about GPUs the build cannot run, once decided
    watch: PendingWatch | None = None  # pending jobs that can never start, cancelled with a line
    exclusions: Exclusions | None = None  # runs that hung, submitted again without the node


class Slurm(Platform[SlurmState]):
    row = platforms.row(PLATFORM)

    def new_state(self) -> SlurmState:
        return SlurmState()

    @staticmethod
    def nodes(invocation: Invocation[SlurmState]) -> slurm_nodes.TrainingNodes | None:
        """The training partitions' nodes, asked of Slurm once by the typed invocation (None in a job)."""
        if not invocation.typed:
            return None
        if invocation.state.nodes is None:
            invocation.state.nodes = slurm_nodes.TrainingNodes(invocation.resources, invocation.train_rules)
        return invocation.state.nodes

    def settle_site(self, invocation: Invocation[SlurmState]) -> dict[str, Any]:
        # auto means what the training partition's nodes have (GPU GRES: gpu), unless the profile declares it;
        # a job takes its invocation's answer (exported in the site section).
        return slurm_nodes.settle_site(invocation.config["site"], invocation.runs, self.nodes(invocation), os.environ)

    def resources(
        self, invocation: Invocation[SlurmState], launch_of: Callable[[Any], Any], accelerator_of: Callable[[Any], str]
    ) -> dict[str, Callable[[Any], Any]]:
        # One Slurm task per training process, CPUs and GPUs per rank (snakeddp.slurm.resources); GPUs of the one
        # type the build runs where the partitions also hold types it does not (site.gpu_type unset).
        site_config = invocation.site

        def resource(name: str) -> Callable[[Any], Any]:
            def value(wc: Any) -> Any:
                accelerator = accelerator_of(wc)
                gpu_type = site_config.gpu_type or (self.mixed(invocation).gpu_type if accelerator == "gpu" else None)
                return slurm_resources(launch_of(wc), accelerator, replace(site_config, gpu_type=gpu_type))[name]

            return value

        return {name: resource(name) for name in RESOURCES}

    def mixed(self, invocation: Invocation[SlurmState]) -> MixedGpus:
        """What GPU train jobs do about GPUs in the training partitions that the ranks' build cannot run
        (snakeddp.slurm.mixed), decided once by the typed invocation (a job's resources are its submitter's)."""
        state, nodes = invocation.state, self.nodes(invocation)
        if state.mixed is None and invocation.site.gpu_type:
            state.mixed = MixedGpus()  # the declared type is what the jobs ask for
        if state.mixed is None:
            try:
                partitions = [p for group in nodes.groups.values() for p in group] if nodes else []
            except slurm_nodes.SlurmNodesError:
                partitions = []  # said by the check of the runs against the nodes, with its HINT
            state.mixed = mixed_gpus.decide(partitions, self.build(invocation), invocation.say)
        return state.mixed

    def check(self, invocation: Invocation[SlurmState]) -> None:
        check_client()
        for run_id, launch in invocation.launches.items() if invocation.in_container else ():
            check_container(run_id, launch)

    @staticmethod
    def build(invocation: Invocation[SlurmState]) -> str | None:
        """The CUDA build of torch the ranks will run (environment.cuda, or the .venv's CUDA build)."""
        return cudabuild.ranks_build(invocation.config["environment"]["cuda"], invocation.same_interpreter)

    def note(self, invocation: Invocation[SlurmState], to_train: Runs, cores: int | None) -> None:
        declared = invocation.declared.get("site") or {}
        nodes, build = self.nodes(invocation), self.build(invocation)
        note_instead(lambda: check_nodes(parts_of(invocation, to_train), invocation.site, declared, nodes, build))
        note_instead(lambda: check_accounts(invocation))

    def before_jobs(self, invocation: Invocation[SlurmState], to_train: Runs, training: Runs, cores: int) -> None:
        check_accounts(invocation)
        declared = invocation.declared.get("site") or {}
        check_nodes(
            parts_of(invocation, training), invocation.site, declared, self.nodes(invocation), self.build(invocation)
        )
        polling.cap_status_checks()
        state = invocation.state
        state.watch = state.watch or PendingWatch(invocation.say)
        state.watch.start()

        def also(job: Any) -> set[str]:  # untyped GPU train jobs leave out nodes whose GPUs the build cannot run
            return mixed_gpus.left_out(self.mixed(invocation), job)

        ledger = invocation.site  # and the nodes results/nodes.json holds too many events of
        state.exclusions = state.exclusions or Exclusions(
            invocation.train_rules, invocation.say, also=also, site=ledger
        )
        state.exclusions.start({run: invocation.launches[run] for run in training}, self.nodes(invocation))

    def close(self, invocation: Invocation[SlurmState]) -> None:
        if invocation.state.watch is not None:
            invocation.state.watch.close()

    def where_tried(self, env: Mapping[str, str]) -> dict[str, Any]:
        return {**where_tried(env), **slurm_status.waited(env)}  # the job's queue wait: a try's account

    def exports(self, config: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, str]:
        # With a config outside /etc/slurm, the jobstep plugin drops SLURM_CONF before it calls srun:
        # a copy is kept, which SRUN_BIN's srun restores.
        return {SLURM_CONF_COPY: env["SLURM_CONF"]} if env.get("SLURM_CONF") else {}

    def path_first(self, env: Mapping[str, str], checkout: Path) -> list[str]:
        return [str(checkout / SRUN_BIN)] if env.get("SLURM_CONF") else []


CONTRACT = Slurm()
