"""Start and stop the workflow's warm process from Snakemake's own (the Snakefile's onstart, onsuccess
and onerror). Imports nothing heavy: every dry run and every job reads the Snakefile."""

from __future__ import annotations

import os
import time

from snakeddp.forking.helper import Helper
from snakeddp.util import handoff

#: A warm process's directory: snakeddp-warm-<pid of Snakemake>-<random>, mode 0700.
PREFIX = "snakeddp-warm-"
#: Said after why the jobs start cold (the server says the same for what it declines).
HINT = (
    "HINT: the jobs run the same, only their start is slower; export SNAKEDDP_WARM_START=0 to start them "
    "cold without this line."
)
SOCKET = handoff.SOCKET
#: Made in its directory once it has imported everything it preloads.
IMPORTED = "imported"
#: How long stopping waits for the warm process (its own stop gives running jobs 5 s) before SIGKILL.
STOP_TIMEOUT_S = 10.0


def why_cold(deployment: set[str], env: dict[str, str] | os._Environ) -> str | None:
    """Why this invocation's jobs start cold, or None: they are forked from a warm process."""
    from snakeddp.cluster.warm import enabled  # its HINT names the switch when it is mistyped

    if not enabled(env):
        return ""  # the user's choice: nothing to say
    if deployment & {"CONDA", "APPTAINER"}:
        which = " and ".join(sorted(d.lower() for d in deployment & {"CONDA", "APPTAINER"}))
        return f"--sdm {which} runs each job in an environment of its own"
    return None


class WarmProcess(Helper):
    """One warm process for one Snakemake invocation: started by ``start``, gone by ``close`` or with
    Snakemake itself (it watches its parent): an owner-only helper process (snakeddp.forking.helper)."""

    def __init__(
        self,
        entries: tuple[str, ...] = handoff.ENTRY_POINTS,
        stderr: int | None = None,
        needs: dict[str, str] | None = None,
        slow: tuple[str, ...] | None = None,
    ) -> None:
        super().__init__(PREFIX, "warm", STOP_TIMEOUT_S)
        self.entries = entries  # what it runs (its starter decides; a job's request never can)
        self.needs = needs  # which entry's jobs wait for which import (default: the server's NEEDS)
        self.slow = slow  # what the heavy warm process imports (default: preload.SLOW)
        self.stderr = stderr  # Snakemake's own by default: the warm process's few lines are the workflow's

    def start(self, env: dict[str, str] | None = None, preload: tuple[str, ...] = ()) -> str:
        """Start it and return its socket's path (handoff.SOCKET's value for the jobs). It imports
        ``preload`` (the invocation's, snakeddp.warm.preload.for_rules), by default what every step imports."""
        args = [
            *(f"--entry={entry}" for entry in self.entries),
            *(f"--need={entry}={module}" for entry, module in (self.needs or {}).items()),
            *(f"--preload={module}" for module in preload),
            *(f"--slow={module}" for module in self.slow or ()),
        ]
        # env: Snakemake's own, which every job inherits.
        return self.start_module("snakeddp.warm", args, env=env, stderr=self.stderr)

    def imported(self, timeout: float) -> bool:
        """Wait until it has imported everything it preloads, or all it will (its heavy warm process
        died), or ``timeout`` seconds; whether it has.
        Jobs do not wait for this (they are forked between imports): benchmarks and tests do."""
        deadline = time.monotonic() + timeout
        marker = os.path.join(self.directory or "", IMPORTED)
        while not os.path.exists(marker):
            if time.monotonic() > deadline or self.process is None or self.process.poll() is not None:
                return False
            time.sleep(0.05)
        return True
