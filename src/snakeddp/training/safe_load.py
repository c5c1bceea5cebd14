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
        "snakemake: the run trains again from a last.ckpt saved before it, or from its first epoch where none is."
    )


def check_fits(path: Path, model: torch.nn.Module) -> None:
    """Raise CheckpointError, naming the first weight that differs, when ``path``'s weights do not fit ``model`` as
    its code builds it now: a change the attempt key cannot see (a module the model imports by name at run time, an
    installed package edited in place) would otherwise fail every rank's resume with torch's size-mismatch
    traceback, on every rerun. Names missing or extra count only where the model loads strictly, as Lightning does."""
    saved = read_checkpoint(path).get("state_dict")
    if not isinstance(saved, dict):
        return  # a strategy's own layout (sharded): its loader says what does not fit
    own = model.state_dict()
    what = next(
        (
            f"{name} is {list(saved[name].shape)} there and {list(tensor.shape)} here"
            for name, tensor in own.items()
            if name in saved and hasattr(saved[name], "shape") and tuple(saved[name].shape) != tuple(tensor.shape)
        ),
        None,
    )
    if what is None and getattr(model, "strict_loading", True):
        missing, extra = [n for n in own if n not in saved], [n for n in saved if n not in own]
        if missing or extra:
            what = f"{missing[0]} is not there" if missing else f"{extra[0]} is not here"
    if what is None:
        return
    folder = path.parent
    raise CheckpointError(
        f"{path}: its weights do not fit {type(model).__name__} as its code builds it now ({what}): the model's "
        "code changed since it was saved, where the attempt key does not look (a module imported by name at run "
        f"time, an installed package). HINT: put that code back as it was, or move the checkpoints away (mv "
        f"{folder} {folder}.unfit) and rerun: the run trains from its first epoch."
    )
