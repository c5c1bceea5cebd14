"""torchrun, exiting without its final garbage collection: ``python -m snakeddp.cluster.agent ARGS``.

The local profile starts its ranks with this instead of ``python -m torch.distributed.run ARGS``:
the same arguments, the same process (torch's elastic agent, run in place with ``runpy``), the
same exit codes. torchrun imports torch, and at exit Python's final collection walked every
object of it: 0.4 s between the last rank's exit and torchrun's (0.62 -> 0.25 s here), at the
end of every local run (snakeddp.util.shutdown).
"""

from __future__ import annotations

import runpy

from snakeddp.forking.child import die_with_parent
from snakeddp.util.shutdown import freeze_at_exit

TORCHRUN = "torch.distributed.run"

if __name__ == "__main__":
    # In a session of its own (snakeddp.cluster.torchrun), a kill of the launcher's process group misses it: a
    # killed launcher takes it along, and its workers with it, as the supervisor's does.
    die_with_parent()
    freeze_at_exit()
    runpy.run_module(TORCHRUN, run_name="__main__", alter_sys=True)
