"""A run that hung on a node is submitted again without it (sbatch --exclude), as
snakemake-executor-plugin-slurm leaves out nodes that failed (NODE_FAIL).

The rank the others waited for names its node (SLURMD_NODENAME) in the try's record (tries.json,
snakeddp.run.tries); when Snakemake submits that run's train job again (the profile's ``retries``, or
the next invocation), the plugin's sbatch gets ``--exclude=<those nodes>`` with the nodes it saw fail
(compat.snakemake_executor_plugin_slurm.leave_out_nodes), and Snakemake's terminal says so once per
run. The retry resumes from the last checkpoint; each try records the nodes Slurm was told to leave
out (``where_tried``: scontrol's ExcNodeList), so the run's history lists them.

A node is also remembered past its run: the checkout's ledger (results/nodes.json, snakeddp.run.ledger) holds
every hang (and slow spell, failure) of each node, and a node with ``site.exclude_after_events`` of them in
``site.exclude_within_days`` days is left out of every train job submitted after (a later invocation's, or a
later run's of the same invocation: the ledger is read again when it changed), said once in one line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from snakeddp.compat.snakemake_executor_plugin_slurm import leave_out_nodes
from snakeddp.config.parts import Launch, Site
from snakeddp.errors import RunStateError
from snakeddp.run import ledger, tries
from snakeddp.run.layout import RunPaths
from snakeddp.slurm.launcher import LaunchError, hostnames, scontrol_show
from snakeddp.slurm.nodes import SlurmNodesError, TrainingNodes

RESULTS = "results"


class Exclusions:
    """The nodes each run's hung tries named, read when its train job is submitted, those ``also`` names for
    the job (nodes whose GPUs its ranks could not run: snakeddp.slurm.mixed), and the nodes the ledger holds
    too many events of (``site``'s settings; none without a site)."""

    def __init__(
        self,
        train_rules: tuple[str, ...],
        say: Callable[[str], None],
        results: Path = Path(RESULTS),
        also: Callable[[Any], set[str]] = lambda job: set(),
        site: Site | None = None,
    ):
        self.train_rules, self.say, self.results, self.also = train_rules, say, results, also
        self.said: dict[str, tuple[str, ...]] = {}
        self.remembered = Remembered(site, say, results) if site is not None else None

    def start(self, launches: Mapping[str, Launch] | None = None, nodes: TrainingNodes | None = None) -> bool:
        """From now on every submission of this process leaves them out; False where the plugin is not the
        release that was read (then nothing is left out). A ledger snakeddp cannot read, or one that leaves a
        run to train (``launches``: its launch part by run id) fewer nodes that are up than it asks, stops the
        invocation here, before anything is submitted (a LedgerError: one line with a HINT)."""
        if self.remembered is not None:
            check_room(launches or {}, nodes, self.remembered.now(), self.results)
        return leave_out_nodes(self.nodes_of)

    def nodes_of(self, job: Any) -> set[str]:
        rule = getattr(getattr(job, "rule", None), "name", None)
        run = (getattr(job, "wildcards_dict", None) or {}).get("run")
        if rule not in self.train_rules or not run:
            return set()
        also = self.also(job) | (self.remembered.now() if self.remembered is not None else set())
        try:
            nodes = tries.hang_nodes(tries.read(RunPaths.under(self.results, run).folder))
        except RunStateError as error:  # the job itself says so, and stops, in its one line
            self.say(f"run {run}: its tries could not be read, so the nodes where it hung are not left out: {error}")
            return also
        if nodes and self.said.get(run) != tuple(nodes):
            self.said[run] = tuple(nodes)
            self.say(f"run {run}: submitting it without {', '.join(nodes)} (sbatch --exclude), where it hung before")
        return set(nodes) | also


class Remembered:
    """The nodes the ledger holds ``site.exclude_after_events`` events of within ``site.exclude_within_days``,
    read again whenever the file changed: a node that reaches them while the invocation goes on (two runs of a
    sweep hung there) is left out of the runs submitted after. Each node is said once, when first left out."""

    def __init__(self, site: Site, say: Callable[[str], None], results: Path = Path(RESULTS)):
        self.site, self.say, self.results = site, say, results
        self.stamp: tuple[int, int, int] | None = None  # the file as last read (None: there was none)
        self.read = False
        self.nodes: set[str] = set()
        self.said: set[str] = set()

    def now(self) -> set[str]:
        if self.site.exclude_after_events is None:
            return set()
        try:
            found = ledger.path(self.results).stat()
            stamp: tuple[int, int, int] | None = (found.st_ino, found.st_mtime_ns, found.st_size)  # replaced whole
        except FileNotFoundError:
            stamp = None
        if self.read and stamp == self.stamp:
            return self.nodes
        first, self.read, self.stamp = not self.read, True, stamp
        try:
            left_out = ledger.to_leave_out(self.results, self.site.exclude_after_events, self.site.exclude_within_days)
        except ledger.LedgerError as error:
            if first:
                raise
            self.say(f"the ledger of nodes changed and cannot be read, so the nodes it named stay left out: {error}")
            return self.nodes
        fresh = {node: events for node, events in left_out.items() if node not in self.said}
        if fresh:
            self.say(leaving_out(fresh, self.site, self.results))
        self.nodes, self.said = set(left_out), self.said | set(fresh)
        return self.nodes


def check_room(
    launches: Mapping[str, Launch], nodes: TrainingNodes | None, left_out: set[str], results: Path = Path(RESULTS)
) -> None:
    """A run whose partitions keep fewer nodes that are up than its launch.nodes once the ledger's nodes are
    left out would never be submitted (sbatch refuses an --exclude that leaves too few): refused in one line."""
    if not left_out or nodes is None or not launches:
        return
    try:
        groups = nodes.groups
    except SlurmNodesError:  # said by the check of the runs against the nodes, with its HINT
        return
    for group in groups.values():
        kept = max(sum(node.name not in left_out for node in partition.up) for partition in group)
        up = max(len(partition.up) for partition in group)
        gone = sorted({node.name for partition in group for node in partition.up} & left_out)
        for run_id, launch in launches.items():
            asked = launch.nodes
            if kept < asked <= up:  # too few without the ledger is the check of the runs against the nodes
                names = ",".join(partition.name for partition in group)
                raise ledger.LedgerError(
                    f"run {run_id} asks for {asked} node(s), and Slurm partition {names} keeps {kept} up once "
                    f"{', '.join(gone)} are left out for their events in {ledger.path(results)}, so sbatch "
                    f"would refuse its job. HINT: once a node is repaired, `snakeddp nodes --clear {gone[0]}` (or "
                    "raise site.exclude_after_events in the profile's config: entries)."
                )


def leaving_out(nodes: dict[str, list[dict[str, Any]]], site: Site, results: Path) -> str:
    """The line that says which nodes the ledger leaves out, with their events, and how to use one again."""
    told = "; ".join(f"{node}: {', '.join(map(ledger.summary, events))}" for node, events in nodes.items())
    clear = " ".join(f"`snakeddp nodes --clear {node}`" for node in nodes)
    return (
        f"leaving {', '.join(nodes)} out of every train job (sbatch --exclude): {ledger.path(results)} holds "
        f"{site.exclude_after_events} or more events of each in the last {site.exclude_within_days:g} days "
        f"({told}); {clear} to use it again"
    )


def where_tried(env: Mapping[str, str]) -> dict[str, Any]:
    """The job a train job's try ran in, its nodes and the nodes it was told to leave out, as Slurm says."""
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        return {}
    try:
        job = scontrol_show("job", job_id, env)
        return {
            "job_id": job_id,
            "nodes": hostnames(job.get("NodeList", ""), env),
            "excluded_nodes": hostnames(job.get("ExcNodeList", ""), env),
        }
    except LaunchError:  # Slurm did not answer: the try is still recorded, without where it ran
        return {"job_id": job_id}
