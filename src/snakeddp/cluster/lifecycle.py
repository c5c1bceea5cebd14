"""Tie a training process's life to its launcher's, so no rank outlives a killed run."""

from __future__ import annotations

import signal

from snakeddp.errors import HangError

# Ask Linux to SIGKILL this process when its parent (torchrun, srun's step, orted) dies: the forking
# layer's, which every forked job and rank sets too.
from snakeddp.forking.child import die_with_parent as die_with_parent

PREEMPTED_EXIT_CODE = 75  # EX_TEMPFAIL, "try again": what a preempted run wants
# A rank that found the run hung (snakeddp.training.watch) or a peer that never came: the other ranks
# are stuck, so a launcher kills them at once instead of waiting for them to save.
HUNG_EXIT_CODE = HangError.exit_status
# What a launcher passes on to the processes it started (snakeddp.launch, the supervisor).
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)
