"""python -m bench.profiled OUT_DIR MODULE [ARGS...]: run a module under cProfile, one stats file per rank.

Used inside torchrun to profile the real training processes:
``torchrun ... -m bench.profiled OUT -m-less-module snakeddp.train --config ...`` writes
OUT/rank-<RANK>.prof for each rank.

It imports snakeddp.train (torch, Lightning) when it is imported, before any profiler: a supervisor that forks
the ranks (``--fork-ranks``) imports it once and every rank starts with it imported, as the warm ranks of the
runs it profiles do, so a rank's profile is its run, not its imports (each rank imported under cProfile: 13 s
of CPU for the whole run instead of 6 s).
"""

from __future__ import annotations

import cProfile
import os
import runpy
import sys
from pathlib import Path

import snakeddp.train  # noqa: F401  (see above)


def main() -> int:
    out, module, *args = sys.argv[1:]
    sys.argv = [module, *args]
    profiler = cProfile.Profile()
    code = 0
    try:
        profiler.runcall(runpy.run_module, module, run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        Path(out).mkdir(parents=True, exist_ok=True)
        profiler.dump_stats(Path(out) / f"rank-{os.environ.get('RANK', '0')}.prof")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
