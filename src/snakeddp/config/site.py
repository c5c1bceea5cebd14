"""What a run asks of the nodes it lands on, from its ``launch:`` and the profile's ``site:``.

``launch.accelerator: auto`` cannot be resolved from this machine for a cluster's nodes, so on
a cluster platform it means what the profile declares (``site.accelerator``), and with nothing
declared it is refused before anything is submitted: a GPU cluster never trains on its CPUs
unasked. On slurm the workflow asks Slurm what the training partition's nodes have and fills the
declaration in when the profile makes none (``snakeddp.slurm.nodes``), so the ranks read
the same answer. On the local platform it means this machine's GPUs, counted as CUDA will show them
(``snakeddp.util.gpus``): gpu when there are as many as the run's ranks and the installed torch's CUDA
build runs on them (its driver, their compute capability), else cpu. The workflow
(Slurm resources, preflight), ``snakeddp.launch`` (which hands its decision to every rank) and a rank
started by hand resolve it with the same function. Pure: no torch, no I/O but reading the local
machine's driver directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from snakeddp.config.parts import Launch, Site
from snakeddp.errors import ConfigError
from snakeddp.platforms import row
from snakeddp.util import amdgpus, cudabuild, gpus

# Host memory of a CPU run's node when launch.mem_mb is null (the default before GPUs were sized).
CPU_MEM_MB_PER_NODE = 4000


class SiteError(ConfigError):
    """What the profile declares about its nodes does not settle the run's request."""


def accelerator(requested: str, platform: str, site: Site, *, run_id: str | None = None) -> str:
    """``requested`` (a run's launch.accelerator) on a cluster platform: cpu or gpu (elsewhere it is
    returned as it is: ``resolved`` decides the local platform's auto)."""
    if requested != "auto" or row(platform).this_machine:
        return requested
    declared = site.accelerator
    if declared is None:
        where = f"run {run_id}: " if run_id else ""
        raise SiteError(
            f"{where}launch.accelerator is auto, and the {platform} profile does not say what its nodes have "
            "(site.accelerator), so this machine cannot tell GPU nodes from CPU ones. HINT: declare it in the "
            'profile\'s config: entries ("site={accelerator: gpu}", or cpu), or set launch.accelerator: gpu (or cpu).'
        )
    return declared


@dataclass(frozen=True)
class NoGpus:
    """Why this machine cannot train a run on its GPUs."""

    reason: str
    #: The environment.cuda builds that would run here, where the installed build is why (else None).
    builds: list[str] | None = None
    #: The NVIDIA driver's version, where a newer one would do too (else None).
    driver: str | None = None
    #: The GPUs' models, where forward compatibility could make up for the driver (it serves data-centre GPUs).
    models: tuple[str, ...] = ()


def why_not_gpus(devices: int, env: Mapping[str, str] = os.environ) -> NoGpus | None:
    """Why this machine cannot train ``devices`` ranks on its GPUs, as a process started with ``env`` sees
    them (fewer GPUs than ranks, a CPU build of torch, a driver older than the installed torch's CUDA build, a
    compute capability the build has no kernels for); None where it can. Asks the driver, never CUDA."""
    if cudabuild.installed_hip():  # torch's ROCm build: AMD GPUs, through the same torch.cuda API
        if len(amdgpus.visible(env)) < devices:
            return NoGpus(f"this machine shows {amdgpus.describe(env)} (torch is a ROCm build)")
        return None
    seen = gpus.driver()
    shown = gpus.apply_visible(seen, env)
    if len(shown) < devices:
        amd = f" and {amdgpus.describe(env)}, which need torch's ROCm build" if amdgpus.visible(env) else ""
        return NoGpus(f"this machine shows {gpus.describe(env, seen=seen)}{amd}")
    build = cudabuild.installed_cuda()
    if build is None and cudabuild.installed_torch():
        return NoGpus("the installed torch is a CPU build", cudabuild.builds_under(seen.version))
    models = [gpu.model for gpu in shown[:devices]]
    if cudabuild.driver_too_old(seen.version, build) and not cudabuild.forward_compat_covers(env, models):
        needed = cudabuild.driver_needed(build)
        return NoGpus(
            f"the NVIDIA driver is {seen.version}, older than the installed torch's CUDA {build} build needs "
            f"({needed[0]} or newer)",
            cudabuild.builds_under(seen.version),
            driver=seen.version,
            models=tuple(models),
        )
    for gpu in shown[:devices]:
        code = 10 * gpu.capability[0] + gpu.capability[1] if gpu.capability else None
        if build and code and not cudabuild.has_kernels(build, code):
            return NoGpus(
                f"{gpu.model} has compute capability {code // 10}.{code % 10}, which the installed torch's CUDA "
                f"{build} build has no kernels for",
                cudabuild.builds_for(code),
            )
    return None


def local_accelerator(launch: Launch, env: Mapping[str, str] = os.environ) -> str:
    """auto on this machine: gpu when it shows a process (``env``) a GPU for each of the run's ranks that the
    installed torch can run on, else cpu, so a one-GPU workstation trains a 2-rank run on its CPU rather than
    failing it, and so does a machine whose driver is older than torch's build."""
    if launch.accelerator != "auto":
        return launch.accelerator
    return "gpu" if why_not_gpus(launch.devices, env) is None else "cpu"


def resolved(
    launch: Launch,
    platform: str,
    site: Site,
    *,
    run_id: str | None = None,
    env: Mapping[str, str] = os.environ,
) -> str:
    """The run's accelerator where it runs, as the workflow checks and sizes its jobs: cpu or gpu."""
    if not row(platform).this_machine:
        return accelerator(launch.accelerator, platform, site, run_id=run_id)
    return local_accelerator(launch, env)


def mem_mb(launch: Launch, resolved: str, site: Site) -> int:
    """Host memory per node: launch.mem_mb when set, else site.mem_mb_per_gpu per GPU rank (CPU: a flat
    default)."""
    if launch.mem_mb is not None:
        return launch.mem_mb
    if resolved == "gpu":
        return launch.devices * site.mem_mb_per_gpu
    return CPU_MEM_MB_PER_NODE


def cpus_per_process(launch: Launch, resolved: str, site: Site) -> int:
    """CPU cores each rank is given by the scheduler: its threads, and on a GPU site.cpus_per_gpu at least."""
    threads = launch.threads_per_process
    return max(threads, site.cpus_per_gpu) if resolved == "gpu" else threads
