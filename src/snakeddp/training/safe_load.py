"""Every checkpoint snakeddp resumes from is read first with torch's weights-only unpickler.

Lightning passes ``weights_only=True`` on to ``torch.load`` for DDP, but its FSDP strategy sends a
single-file checkpoint through its own lazy unpickler, which runs whatever a crafted pickle asks
for (lightning 2.6, ``FSDPStrategy.load_checkpoint`` -> ``_lazy_load``). Reading the file once with
the weights-only unpickler before any strategy sees it refuses such a file on every strategy: what
it accepts references only tensors and plain values, so no later unpickler of the same bytes can run
code. The same read finds a truncated or empty file, which would otherwise fail every rerun with
torch's raw error (whose advice, ``weights_only=False``, snakeddp never follows).
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from snakeddp.errors import CheckpointError


def check_checkpoint(path: Path) -> None:
    """Raise CheckpointError, naming ``path`` and what to do, unless it loads weights-only."""
    read_checkpoint(path)


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint's contents (tensors memory-mapped, on the CPU), read weights-only; CheckpointError,
    naming ``path`` and what to do, for a crafted or damaged file."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError:
        why = "holds objects other than tensors and plain values, which loading would run as code"
    except (EOFError, RuntimeError, OSError, ValueError, zipfile.BadZipFile):
        why = "is damaged or incomplete (empty, truncated, or not a checkpoint)"
    raise CheckpointError(
        f"{path}: this checkpoint {why}; snakeddp does not load it. HINT: delete it (rm {path}) and rerun "
        "snakemake: the run trains again from its first epoch."
    )
