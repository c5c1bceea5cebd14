"""The toy queue: what a cloud's scheduler does with a submitted job, on this machine.

    python -m snakeddp_toy.queue REQUEST        (REQUEST: the job's request.json, snakeddp_toy.job)

It places every rank on its one node: each a process of the request's command, started in the request's
folder (the code snapshot) with the machine's environment (nothing of the workflow's SNAKEDDP_* but what
the request says the job inherits), torch's variables, the node (TOY_NODE) and this job's id (TOY_JOB),
its output in logs/rank-N.log; once all have ended it writes ended.json: the status and each exit code.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from snakeddp.util.fsutil import atomic_write_json
from snakeddp_toy import JOB, NODE


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    job_dir, ranks, job_id = Path(request["job"]), int(request["ranks"]), f"toy-{os.getpid()}"
    (job_dir / "logs").mkdir(parents=True, exist_ok=True)
    machine = {name: value for name, value in os.environ.items() if not name.startswith("SNAKEDDP_")}
    placed = {NODE: request["node"], JOB: job_id, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    started = []
    for rank in range(ranks):
        torch_variables = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(ranks)}
        torch_variables.update(NODE_RANK="0", LOCAL_WORLD_SIZE=str(ranks))
        env = {**machine, **request["variables"], **placed, **torch_variables}
        with (job_dir / "logs" / f"rank-{rank}.log").open("w") as log:
            started.append(
                subprocess.Popen(request["command"], cwd=request["cwd"], env=env, stdout=log, stderr=subprocess.STDOUT)
            )
    codes = [process.wait() for process in started]
    status = "Completed" if not any(codes) else "Failed"
    atomic_write_json(job_dir / "ended.json", {"job": job_id, "status": status, "codes": codes})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
