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
``site.exclude_within_days`` days is left out of every train job of later invocations, said once in one line
when the first job is submitted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from snakeddp.compat.snakemake_executor_plugin_slurm import leave_out_nodes
from snakeddp.config.parts import Site
from snakeddp.errors import RunStateError
from snakeddp.run import ledger, tries
from snakeddp.run.layout import RunPaths
from snakeddp.slurm.launcher import LaunchError, hostnames, scontrol_show

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
        self.train_rules, self.say, self.results, self.also, self.site = train_rules, say, results, also, site
        self.said: dict[str, tuple[str, ...]] = {}
        self.remembered: set[str] | None = None

    def start(self) -> bool:
        """From now on every submission of this process leaves them out; False where the plugin is not the
        release that was read (then nothing is left out). The ledger is read once, here."""
        if self.remembered is None:
            self.remembered = remembered(self.site, self.say, self.results) if self.site else set()
        return leave_out_nodes(self.nodes_of)

    def nodes_of(self, job: Any) -> set[str]:
        rule = getattr(getattr(job, "rule", None), "name", None)
        run = (getattr(job, "wildcards_dict", None) or {}).get("run")
        if rule not in self.train_rules or not run:
            return set()
        also = self.also(job) | (self.remembered or set())
        try:
            nodes = tries.hang_nodes(tries.read(RunPaths.under(self.results, run).folder))
        except RunStateError as error:  # the job itself says so, and stops, in its one line
            self.say(f"run {run}: its tries could not be read, so the nodes where it hung are not left out: {error}")
            return also
        if nodes and self.said.get(run) != tuple(nodes):
            self.said[run] = tuple(nodes)
            self.say(f"run {run}: submitting it without {', '.join(nodes)} (sbatch --exclude), where it hung before")
        return set(nodes) | also


def remembered(site: Site, say: Callable[[str], None], results: Path = Path(RESULTS)) -> set[str]:
    """The nodes the ledger holds ``site.exclude_after_events`` events of within ``site.exclude_within_days``,
    said in one line; a ledger snakeddp cannot read stops the invocation before anything is submitted (its
    LedgerError, one line with a HINT)."""
    if site.exclude_after_events is None:
        return set()
    found = ledger.to_leave_out(results, site.exclude_after_events, site.exclude_within_days)
    if found:
        told = "; ".join(f"{node}: {', '.join(map(ledger.summary, events))}" for node, events in found.items())
        clear = " ".join(f"`snakeddp nodes --clear {node}`" for node in found)
        say(
            f"leaving {', '.join(found)} out of every train job (sbatch --exclude): {ledger.path(results)} holds "
            f"{site.exclude_after_events} or more events of each in the last {site.exclude_within_days:g} days "
            f"({told}); {clear} to use it again"
        )
    return set(found)


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
