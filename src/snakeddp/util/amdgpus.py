"""The AMD GPUs a process would train on with torch's ROCm build, read from the amdgpu kernel driver's KFD
topology (/sys/class/kfd/kfd/topology/nodes/<n>/properties, as rocminfo and ROCr read it), without torch,
HIP or a GPU context.

A topology node with SIMDs is a GPU (the CPU nodes have none); its ``gfx_target_version`` (90402) names
the instruction set (gfx942), and ``unique_id`` the GPU as ROCR_VISIBLE_DEVICES may name it. Which of them
a process sees follows ROCr and HIP: ROCR_VISIBLE_DEVICES first (indices or ``GPU-<unique id>``), then
HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES (indices), each applied to what the one before left.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

TOPOLOGY = Path("/sys/class/kfd/kfd/topology/nodes")
#: The variables that hide AMD GPUs, in the order ROCr then HIP apply them.
VISIBLE = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
# The product families of the gfx targets torch's ROCm builds ship kernels for (AMD's ROCm GPU list).
FAMILIES = {
    "gfx908": "AMD Instinct MI100", "gfx90a": "AMD Instinct MI200 series", "gfx942": "AMD Instinct MI300 series",
    "gfx950": "AMD Instinct MI350 series", "gfx1030": "AMD Radeon PRO W6800 / RX 6000",
    "gfx1100": "AMD Radeon RX 7900 / PRO W7900", "gfx1101": "AMD Radeon RX 7800 / PRO W7800",
    "gfx1200": "AMD Radeon RX 9060", "gfx1201": "AMD Radeon RX 9070 / AI PRO R9700",
}  # fmt: skip


@dataclass(frozen=True)
class AmdGpu:
    """One AMD GPU as the KFD topology lists it."""

    gfx: str
    unique_id: str

    @property
    def model(self) -> str:
        """``AMD Instinct MI300 series (gfx942)``; ``AMD GPU (gfx...)`` for a target not in the table."""
        return f"{FAMILIES.get(self.gfx, 'AMD GPU')} ({self.gfx})"


def gfx_name(target_version: int) -> str:
    """KFD's gfx_target_version (major x 10000 + minor x 100 + stepping) as LLVM names the target: 90010 is
    gfx90a, 90402 gfx942, 110000 gfx1100."""
    major, minor, stepping = target_version // 10000, target_version // 100 % 100, target_version % 100
    return f"gfx{major}{minor:x}{stepping:x}"


def _properties(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    return dict(line.split(None, 1) for line in text.splitlines() if len(line.split(None, 1)) == 2)


def installed(topology: Path = TOPOLOGY) -> list[AmdGpu]:
    """Every AMD GPU of the machine, in ROCr's order (the topology's node numbers)."""
    nodes = sorted((p for p in topology.glob("*") if p.name.isdigit()), key=lambda p: int(p.name))
    found = []
    for node in nodes:
        props = _properties(node / "properties")
        if int(props.get("simd_count", "0") or 0) > 0 and props.get("gfx_target_version", "0").isdigit():
            found.append(AmdGpu(gfx_name(int(props["gfx_target_version"])), props.get("unique_id", "")))
    return found


def _select(gpus: list[AmdGpu], value: str) -> list[AmdGpu]:
    chosen = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        if item.isdigit():
            if int(item) >= len(gpus):
                break  # as CUDA and HIP do: an index out of range ends the list
            chosen.append(gpus[int(item)])
        else:
            # GPU-<unique id in hex> (ROCr); an unknown name ends the list.
            match = [gpu for gpu in gpus if gpu.unique_id and item.lower() == f"gpu-{int(gpu.unique_id):x}"]
            if not match:
                break
            chosen.append(match[0])
    return chosen


def visible(env: Mapping[str, str] = os.environ, topology: Path = TOPOLOGY) -> list[AmdGpu]:
    """The AMD GPUs a process started with ``env`` enumerates."""
    shown = installed(topology)
    rocr, hip, cuda = (env.get(name) for name in VISIBLE)
    if rocr is not None:
        shown = _select(shown, rocr)
    # HIP reads HIP_VISIBLE_DEVICES, and CUDA_VISIBLE_DEVICES where that is unset.
    listed = hip if hip is not None else cuda
    return shown if listed is None else _select(shown, listed)


def describe(env: Mapping[str, str] = os.environ, topology: Path = TOPOLOGY) -> str:
    """``2 AMD GPUs (AMD Instinct MI300 series (gfx942))``; what hides the others, where something does."""
    every, shown = installed(topology), visible(env, topology)
    models = ", ".join(sorted({gpu.model for gpu in shown}))
    hidden = [f"{name}={env[name]!r}" for name in VISIBLE if name in env]
    text = f"{len(shown)} AMD GPU{'' if len(shown) == 1 else 's'}" + (f" ({models})" if models else "")
    if len(shown) < len(every):
        text += f" of {len(every)} installed ({', '.join(hidden)} hides the others)"
    return text
