"""Stand-in NVIDIA GPUs for the tests, on machines without any: every process started through
``StandIn.command`` sees ``count`` GPUs of one model, compute capability, CUDA build of torch and driver
version, up to its first CUDA call (which fails, saying so).

Two parts, each where the real thing lives: a made-up driver directory (``/proc/driver/nvidia``: a
folder per GPU with its ``information``, the driver's ``version``) bind-mounted over /proc/driver in a
private mount namespace (``unshare``, as root), which snakeddp reads to count GPUs without torch; and
``tests/gpu_standin/sitecustomize.py`` on PYTHONPATH, which makes torch's CUDA queries answer for them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SITE = Path(__file__).with_name("gpu_standin")


@dataclass
class StandIn:
    root: Path
    count: int = 1
    capability: str = "8.0"
    build: str = "13.0"
    model: str = "NVIDIA A100-SXM4-40GB"
    driver: str = "580.95.05"

    def __post_init__(self) -> None:
        nvidia = self.root / "driver" / "nvidia"
        for index in range(self.count):
            folder = nvidia / "gpus" / f"0000:{index + 1:02x}:00.0"
            folder.mkdir(parents=True)
            (folder / "information").write_text(
                f"Model: \t\t {self.model}\nIRQ:   \t\t {100 + index}\n"
                f"GPU UUID: \t GPU-{index:08d}-5a1d-4c6e-9f00-standin\nBus Location: \t {folder.name}\n"
            )
        (nvidia / "gpus").mkdir(parents=True, exist_ok=True)
        (nvidia / "version").write_text(
            f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {self.driver}  Release Build  (dvs-builder@U16)\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
        )

    def env(self, base: dict[str, str], visible: str | None = None) -> dict[str, str]:
        """``base`` with the stand-in's torch answers, and CUDA_VISIBLE_DEVICES as given (None: unset)."""
        env = {k: v for k, v in base.items() if k != "CUDA_VISIBLE_DEVICES"}
        env["PYTHONPATH"] = os.pathsep.join([str(SITE), base.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.update(SNAKEDDP_STANDIN_GPU_CAPABILITY=self.capability, SNAKEDDP_STANDIN_GPU_BUILD=self.build)
        if visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible
        return env

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run where /proc/driver is the stand-in's (a mount namespace of its own)."""
        mount = 'mount --bind "$0" /proc/driver && exec "$@"'
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            mount,
            str(self.root / "driver"),
            *argv,
        ]
