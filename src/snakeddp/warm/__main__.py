"""The workflow's warm process: ``python -m snakeddp.warm --fd N --parent PID``.

Started by Snakemake's process when a local workflow starts (``snakeddp.warm.process``, an owner-only
helper process: snakeddp.forking.helper), it forks every step a job hands it (``snakeddp.util.handoff``),
while it imports what the steps import (numpy, snakeddp) one module at a time between the jobs. What
takes seconds to import (torch, Lightning, the report's matplotlib: ``preload.SLOW``) the heavy warm
process imports, forked from this one, the front one, before either imports anything: the front one
forwards it the jobs that need it (``preload.NEEDS``: a train job's supervisor, the report), so no data
or record job ever waits for torch's import. In each, one thread and a ``selectors`` loop serve every
job at once: the listening socket (the heavy one: the channel from the front one), each job's connection
(closed early: its client was killed, so the job is too) and each job's pidfd (readable: the job ended;
its status goes back to its client).

Only its owner can use it: the socket lies in a directory of mode 0700, the peer's uid is checked
with SO_PEERCRED, only the workflow's own steps (``handoff.ENTRY_POINTS``) are run, and a request
is taken only for what the job's own command line would have set anyway (its arguments,
environment, working directory, umask, limits, stdio), for the same interpreter, flags and import
path as this process's: anything else is declined and the job starts cold (``admission``).

It goes away with Snakemake: asked to (SIGTERM), or when Snakemake dies (PR_SET_PDEATHSIG, and its
parent's pid checked every second); the heavy one goes away with the front one the same way. Jobs still
running then get SIGTERM, and SIGKILL after ``STOP_GRACE_S``, as a job of a killed scheduler should:
nothing is left behind.

This module starts it; the parts are the loop, the jobs' forks and the stop (``server``), the front and
the heavy warm process (``front``, ``heavy``), the channel between them (``channel``), what each imports
when (``importing``), what it takes (``admission``) and a forked job's own set-up (``jobs``), on top of
what the supervisor's forked ranks share with them (``snakeddp.forking``).
"""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Sequence
from typing import NoReturn

from snakeddp.forking import helper
from snakeddp.util import handoff
from snakeddp.warm.admission import Admission
from snakeddp.warm.front import Front
from snakeddp.warm.heavy import start_heavy
from snakeddp.warm.importing import Imports
from snakeddp.warm.preload import ALL, NEEDS, OPTIONAL, SLOW
from snakeddp.warm.server import STOP_SIGNALS, die_with


def main(argv: Sequence[str] | None = None) -> NoReturn:
    parser = argparse.ArgumentParser(prog="python -m snakeddp.warm", description=__doc__)
    helper.add_arguments(parser)
    parser.add_argument(
        "--entry",
        action="append",
        help="a module it may run as `python -m MODULE` (repeated; default: the workflow's steps)",
    )
    parser.add_argument(
        "--preload",
        action="append",
        metavar="MODULE",
        help="import MODULE, lightest first (repeated; default: what every step imports, preload.ALL)",
    )
    parser.add_argument(
        "--need",
        action="append",
        metavar="ENTRY=MODULE",
        help="ENTRY's jobs wait until MODULE is imported (repeated; ENTRY may name a step: 'MODULE "
        "SUBCOMMAND'; default: NEEDS)",
    )
    parser.add_argument(
        "--slow",
        action="append",
        metavar="MODULE",
        help="of the preloaded modules, one the heavy warm process imports (repeated; default: preload.SLOW)",
    )
    args = parser.parse_args(argv)
    die_with(args.parent)
    # A fresh interpreter's handlers, before this process installs its own: every job gets them back.
    handlers = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda signum, frame: None)  # the wake-up fd tells the loop
    # Held until each process's loop has its wake-up fd (Server.serve): a stop that comes first is not lost.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    listener = helper.listener(args)  # bound and listening: a job that comes during an import waits
    home = os.path.dirname(listener.getsockname())
    entries = tuple(args.entry or handoff.ENTRY_POINTS)
    needs = dict(need.split("=", 1) for need in args.need) if args.need else dict(NEEDS)
    preload = list(args.preload or ALL)
    slow = set(args.slow or SLOW)
    heavy = None
    if any(module in slow for module in preload):
        heavy = start_heavy(
            [*(m for m in preload if m in slow), *(m for m in preload if m in entries)], listener, handlers, needs
        )
        preload = [module for module in preload if module not in slow]
    imports = Imports(preload, OPTIONAL, needs)
    Front(listener, args.parent, handlers, imports, Admission(entries), home, heavy).serve()


if __name__ == "__main__":
    main()
