"""What a remote job inherits from the workflow that submitted it: the variables every process of the job
gets, the same for every remote platform (each adds its own: the compute it was sent to, its SDK). Nothing
secret: provenance records them."""

from __future__ import annotations

import os
from collections.abc import Mapping

from snakeddp import platforms
from snakeddp.cluster import network
from snakeddp.provenance.record import code_info
from snakeddp.run import variables as names


def variables(platform: str, env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The job's settings outside the run's identity, for ``platform``'s job.

    Of the network variables only the config's ``network.env`` reaches the job (read from
    ``SNAKEDDP_NETWORK``), never the NCCL_*/GLOO_* the submitting shell exported: a login node's
    NCCL_SOCKET_IFNAME=ib0 names an interface the job's nodes need not have. The tracking and site
    sections travel in the workflow's environment and are copied in, the site so that every rank resolves
    ``launch.accelerator: auto`` as the submitter did, and environment.cuda_forward_compat, which the ranks' GPU
    checks read. The ranks run as the platform the row names
    (``ranks_as``: a Databricks job's driver starts them as the spark platform does), and the code ships
    without .git, so the submitter's commit goes with it.
    """
    inherited = {
        **network.variables({"network": names.network(env)}),
        **{name: env[name] for name in (names.TRACKING, names.SITE, names.CUDA_FORWARD_COMPAT) if name in env},
        names.PLATFORM: platforms.row(platform).ranks_as or platform,
    }
    code = code_info(env)
    if code["commit"]:
        inherited.update({names.CODE_COMMIT: code["commit"], names.CODE_DIRTY: "1" if code["dirty"] else "0"})
    return inherited
