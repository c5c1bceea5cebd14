"""This machine's NVIDIA GPUs as CUDA will show them to a process, found without torch or CUDA.

The driver lists every GPU it drives under /proc/driver/nvidia/gpus/<PCI bus id>/information
(model, UUID) and its own version in /proc/driver/nvidia/version; reading them costs no CUDA
context and no import of torch, so the workflow can size its runs while it plans. What a process
then sees is filtered by CUDA_VISIBLE_DEVICES as the CUDA runtime filters it: unset, every GPU; a
list of indices or UUIDs (GPU-..., a unique prefix will do), visible in that order up to the first
entry that names no GPU (``CUDA_VISIBLE_DEVICES=0,7`` on a one-GPU machine shows one); empty, none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DRIVER = Path("/proc/driver/nvidia")
VISIBLE = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class Gpu:
    bus: str
    model: str
    uuid: str


def _field(text: str, name: str) -> str:
    found = re.search(rf"^{name}:\s*(.+?)\s*$", text, re.MULTILINE)
    return found.group(1) if found else ""


def installed(driver: Path | None = None) -> list[Gpu]:
    """Every GPU the loaded NVIDIA driver lists, in PCI bus order (none without a driver)."""
    found = []
    for folder in sorted(((driver or DRIVER) / "gpus").glob("*")):
        try:
            text = (folder / "information").read_text()
        except OSError:
            continue
        found.append(Gpu(folder.name, _field(text, "Model") or "NVIDIA GPU", _field(text, "GPU UUID")))
    return found


def visible(env: Mapping[str, str], driver: Path | None = None) -> list[Gpu]:
    """The GPUs a process started with ``env`` sees, in CUDA's order."""
    gpus = installed(driver)
    if VISIBLE not in env:
        return gpus
    shown: list[Gpu] = []
    for entry in (part.strip() for part in env[VISIBLE].split(",")):
        if entry.lstrip("-").isdigit():
            index = int(entry)
            match = gpus[index] if 0 <= index < len(gpus) else None
        else:  # a UUID, or a unique prefix of one
            named = [gpu for gpu in gpus if entry and gpu.uuid.startswith(entry)]
            match = named[0] if len(named) == 1 else None
        if match is None or match in shown:
            break  # CUDA ignores the rest of the list after an entry that names no (new) GPU
        shown.append(match)
    return shown


def driver_version(driver: Path | None = None) -> str | None:
    """The loaded NVIDIA kernel module's version (570.86.15), or None when none is loaded."""
    try:
        first = ((driver or DRIVER) / "version").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    found = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", first)
    return found.group(1) if found else first.strip()


def describe(env: Mapping[str, str], driver: Path | None = None) -> str:
    """What this machine shows a process, for a message: '1 GPU (NVIDIA A100-SXM4-40GB)', 'no GPU (...)'."""
    shown, gpus = visible(env, driver), installed(driver)
    setting = f"CUDA_VISIBLE_DEVICES={env[VISIBLE]!r}" if VISIBLE in env else None
    if not gpus:
        return "no GPU (no NVIDIA driver lists one)"
    models = ", ".join(sorted({gpu.model for gpu in shown}))
    if not shown:
        return f"no GPU visible ({len(gpus)} installed, {setting} hides them)"
    hidden = f"; {len(gpus) - len(shown)} more hidden by {setting}" if len(shown) < len(gpus) else ""
    return f"{len(shown)} GPU{'s' if len(shown) > 1 else ''} ({models}{hidden})"
