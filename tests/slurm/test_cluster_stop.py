"""tests/slurm/cluster.sh stop: it ends the cluster's processes, not the shell or wrapper that runs it."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO, subprocess_env


def test_the_cluster_processes_leave_out_the_shell_and_wrapper_that_stop_it(tmp_path):
    """A shell that exported the cluster's SLURM_CONF (`eval "$(cluster.sh env)"`) runs `timeout ... stop`: the
    shell and the timeout hold SLURM_CONF too, and were ended with the daemons (exit 143, `Terminated`)."""
    conf = tmp_path / "slurm.conf"
    probe = (
        "import sys; from types import SimpleNamespace; from tests.slurm.cluster import cluster_processes; "
        f"print(*cluster_processes(SimpleNamespace(conf={str(conf)!r})))"
    )
    script = f'sleep 60 & daemon=$!; echo "$$ $daemon"; timeout 60 {sys.executable} -c "{probe}"; kill $daemon'
    env = subprocess_env(SLURM_CONF=str(conf), PYTHONPATH=str(REPO))
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    (shell, daemon), found = map(int, done.stdout.split()[:2]), {int(pid) for pid in done.stdout.split()[2:]}
    # Of the four processes with the cluster's SLURM_CONF, only the one beside the stop: not the shell, the
    # timeout or the stop itself.
    assert found == {daemon}, (shell, found)
