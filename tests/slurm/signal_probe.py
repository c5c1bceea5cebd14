#!/usr/bin/env python3
"""Which ranks of a real srun/mpirun launch receive Slurm's signals.

Inside an allocation, ``launch`` mode empties the environment the way the Slurm jobstep plugin
does for a rule, then builds the command with snakeddp's launcher and runs it with this file
standing in for the Python interpreter, so the ranks start here (``-m snakeddp.train ...`` is
ignored)::

    signal_probe.py launch srun|mpirun NODES DEVICES OUT_DIR

Each rank writes ``OUT_DIR/ready-<rank>.json`` and, when SIGUSR1 arrives,
``OUT_DIR/signalled-<rank>.json``; it exits when signalled or after two minutes.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

# What snakemake-executor-plugin-slurm-jobstep 0.6 leaves of SLURM_* before it runs a rule.
JOBSTEP_KEEPS = {
    "SLURM_JOB_ID",
    "SLURM_JOBID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_CLUSTER_NAME",
    "SLURM_SUBMIT_DIR",
    "SLURM_SUBMIT_HOST",
}


def launch(name: str, nodes: int, devices: int, out: str) -> None:
    from snakeddp import cluster

    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SRUN_", "SBATCH_")) or k in JOBSTEP_KEEPS
    }
    env.update(SNAKEDDP_SLURM_CONF=os.environ["SLURM_CONF"], PROBE_DIR=out)
    plan = cluster.LaunchPlan(
        nodes=nodes, devices=devices, threads_per_process=1, master_port=None, python=__file__, entry=()
    )
    argv, exports = cluster.get(name).command(plan, env)
    env.update(exports)
    print(" ".join(argv), flush=True)
    os.execvpe(argv[0], argv, env)


def rank() -> None:
    out = Path(os.environ["PROBE_DIR"])
    number = os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ["SLURM_PROCID"]
    record = {"rank": int(number), "node": os.environ.get("SLURMD_NODENAME"), "pid": os.getpid()}
    signalled = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: signalled.append(signum))
    (out / f"ready-{number}.json").write_text(json.dumps(record))
    deadline = time.monotonic() + 120
    while not signalled and time.monotonic() < deadline:
        time.sleep(0.05)
    if signalled:
        # As a rank's Preemption does: a second copy of the signal (its step's and mpirun's daemon's) is ignored,
        # where its default action during the exit killed the rank and mpirun aborted the others unsignalled.
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        (out / f"signalled-{number}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    if sys.argv[1] == "launch":
        launch(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        rank()
