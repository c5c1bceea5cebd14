"""10. Rank start-up: 8 ranks on one node, forked from one warm process vs each a process of its own.

Both cases are the local profile's launch (``python -m snakeddp.launch`` -> the supervisor ->
``snakeddp.train`` on 8 ranks, one thread each) of the same one-epoch run; only
SNAKEDDP_WARM_START differs (1: the supervisor imports once and forks every rank; 0: every rank
starts its own interpreter and imports torch and Lightning itself, as before). The figure is the
time from the launch until every rank has reached its first step: rank 0's first batch (its
``timing.phases.startup_s`` after its process began, whose start time is sampled while it runs),
which comes after the rendezvous and Lightning's set-up that every rank must have joined.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from bench.datasets import data_config, ensure_dataset
from bench.harness import Context, Result, alternate, busy_note, child_env, median, paired_ratio, target_figure
from bench.runs import run_file

NAME = "rank_start"
TITLE = "10. Rank start-up"
RANKS = 8


def started_at(pid: int) -> float:
    """A process's start in epoch seconds, from its clock ticks since boot against the uptime (psutil's
    create_time is up to 1 s early: it adds a boot time in whole seconds; snakeddp.training.phases)."""
    ticks = int(Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[19])
    uptime = float(Path("/proc/uptime").read_text(encoding="utf-8").split()[0])
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


def started_processes(root: psutil.Process, seen: dict[int, float], stop: threading.Event, period: float) -> None:
    """Every descendant's start time (epoch seconds), by pid, until ``stop``: a rank's pid is only in
    provenance.json, written when the process may be gone. The time is the kernel's, whatever ``period``: a
    process need only be seen once while it lives."""
    while not stop.is_set():
        try:
            for child in root.children(recursive=True):
                if child.pid not in seen:
                    try:
                        seen[child.pid] = started_at(child.pid)
                    except (OSError, ValueError, IndexError):
                        continue
        except psutil.Error:
            return
        stop.wait(period)


def launch(run_dir: Path, run: Any, manifest: Path, fork: bool, period: float) -> dict[str, float]:
    """One launch; seconds from it to every rank's first step, and to its exit."""
    run_dir.mkdir(parents=True)
    run.write(run_dir / "run.yaml")
    argv = [sys.executable, "-m", "snakeddp.launch", "--platform", "local", "--config", str(run_dir / "run.yaml")]
    argv += ["--run-dir", str(run_dir), "--data", str(manifest)]
    seen: dict[int, float] = {}
    stop = threading.Event()
    begun = time.time()
    with (run_dir / "launch.log").open("w") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=child_env(SNAKEDDP_WARM_START="1" if fork else "0")
        )
        watcher = threading.Thread(target=started_processes, args=(psutil.Process(process.pid), seen, stop, period))
        watcher.start()
        code = process.wait()
        stop.set()
        watcher.join()
    wall = time.time() - begun
    if code != 0:
        raise RuntimeError(f"launch failed ({code}):\n{(run_dir / 'launch.log').read_text()[-4000:]}")
    record = json.loads((run_dir / "provenance.json").read_text())
    assert record["launch"]["rank_start"] == ("warm" if fork else "cold"), record["launch"]["rank_start"]
    rank0 = next(r["pid"] for r in record["launch"]["ranks"] if r["rank"] == 0)
    phases = record["timing"]["phases"]
    return {
        "ready_s": seen[rank0] + phases["startup_s"] - begun,
        "rank0_imports_s": phases["imports_s"],
        "rank0_born_s": seen[rank0] - begun,
        "wall_s": wall,
    }


def run(ctx: Context) -> Result:
    sizes = ctx.sizes
    ranks = 2 if sizes.tiny else RANKS
    data = data_config(ranks * 32, 16, 64, 1)
    manifest = ensure_dataset(ctx.scratch("data"), data)
    one_epoch = run_file(data, [], 1, 16, ranks)
    counter = iter(range(10_000))
    # How often the launch's processes are listed (each listing walks every process on the machine, 1.5 ms here):
    # --tiny, a fifth as often (0.5-1 s of CPU less); a forked rank still lives over a second.
    period = 0.1 if sizes.tiny else 0.02

    def case(fork: bool):
        # Each run alone under its parent: beside another of the same key, a launch restores it and trains nothing.
        return lambda: launch(ctx.work / "runs" / f"{next(counter)}" / "run", one_epoch, manifest, fork, period)

    samples = alternate(
        {"forked": case(True), "spawned": case(False)}, reps=sizes.reps_or(3), warmup=sizes.warmup_or(1)
    )
    ready = {name: median([s["ready_s"] for s in values]) for name, values in samples.items()}
    result = Result(NAME, TITLE, raw={"samples": samples}, sizes={"ranks": ranks, "cpus": psutil.cpu_count()})
    result.figures.append(
        target_figure(
            "rank_start.ready",
            f"{ranks} ranks on one node ({psutil.cpu_count()} cores): launch until every rank has reached its "
            "first step, forked from one warm process vs each a process of its own",
            "s",
            ready["forked"],
            baseline=ready["spawned"],
            ratio=paired_ratio(samples["forked"], samples["spawned"], "ready_s"),
            ratio_of="forked ÷ spawned",
        )
    )
    born = {name: median([s["rank0_born_s"] for s in values]) for name, values in samples.items()}
    imports = {name: median([s["rank0_imports_s"] for s in values]) for name, values in samples.items()}
    result.notes += [
        f"The same one-epoch run (linear model, {ranks} gloo ranks, one thread each) launched by "
        "`python -m snakeddp.launch` with SNAKEDDP_WARM_START=1 and 0, alternating; medians of the rounds.",
        f"Forked: rank 0 began {born['forked']:.1f} s after the launch (the supervisor imported "
        f"snakeddp.train once, alone) and needed {imports['forked']:.2f} s more before its main(). Spawned: "
        f"it began {born['spawned']:.1f} s after the launch and spent {imports['spawned']:.1f} s in its "
        f"interpreter and imports, while {ranks - 1} other ranks imported the same on the same cores.",
        "The warm process holds what it imported (about 350 MB resident for torch and Lightning); forked "
        "ranks share those pages copy-on-write (it calls gc.freeze() before forking, so no collection in a "
        "rank copies them).",
    ]
    result.notes.append(
        "What is left: forked ranks wait for one import, done alone (the supervisor's, the floor of this "
        "figure: about 3 s on a quiet machine); each train job still starts Python and imports torch in its "
        "supervisor, which a warm process serving Snakemake's jobs would take away (issue 33, items 2 and 5). "
        "On Slurm and AzureML every rank still starts on its own (srun, mpirun and AzureML's distributions "
        "start each rank themselves): forking there needs a launcher that runs the supervisor once per node."
    )
    if note := busy_note():
        result.notes.append(note)
    return result
