"""One interpreter on stand-in machines that imported torch once and forks a process per check (tests only;
tests.gpu_standin.Checks starts it, one per torch build, under that build's version.py).

Each request is one JSON line on stdin: the machine's driver folder and /dev nodes (mounted in the child's own
mount namespace, as ``StandIn.command`` mounts them for a fresh process: standin_machine.py), the child's whole
environment (its CUDA_VISIBLE_DEVICES, the stand-in NVML's file of GPUs), the code and its arguments, and the
files its stdout and stderr go to. The child runs the code as ``python -c`` would, and the answer is one JSON
line with its exit status. Nothing here asks NVML or CUDA: every child starts with torch imported and nothing
of CUDA's or NVML's state, as a rank forked by snakeddp's supervisor does.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

import torch  # noqa: F401  (once, before any fork: what every check would otherwise pay for)
from standin_machine import enter  # this folder is the script's


def child(request: dict) -> int:
    for fd, path in ((1, request["out"]), (2, request["err"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    try:
        enter(request["driver"], request["nodes"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["-c", *request["args"]]
        exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as stop:
        if isinstance(stop.code, int) or stop.code is None:
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = child(request)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # torch's interpreter teardown took seconds under load, and there is nothing to tear down
