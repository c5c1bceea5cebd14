"""A program the tests' warm process may run: it says what it sees, or ends the way it is told to.

python -m tests.warm.probe observe        # one JSON line: argv, environment, cwd, umask, limits, stdio ...
python -m tests.warm.probe imported       # one JSON line: whether torch was imported when it began
python -m tests.warm.probe exit 3 | _exit 7 | raise | kill SIGSEGV | wait PIDFILE | count PIDFILE
"""

from __future__ import annotations

if __name__ == "__main__":  # as the workflow's steps do (snakeddp.steps)
    from snakeddp.util.handoff import hand_off

    hand_off(__spec__.name)

import json
import os
import resource
import signal
import sys
import time

#: Whether the process it began in had imported torch already (a warm process's child, once warm).
BEGAN_WITH_TORCH = "torch" in sys.modules


def observe() -> dict:
    import torch

    from snakeddp.util import handoff

    umask = os.umask(0)
    os.umask(umask)
    return {
        "name": __name__,
        "argv": sys.argv[1:],
        "orig_argv": sys.orig_argv[1:],
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "path0": sys.path[0],
        "umask": umask,
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
        "stdin": sys.stdin.read(),
        "stdout_line_buffered": sys.stdout.line_buffering,
        "stderr_line_buffered": sys.stderr.line_buffering,
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
        "handlers": {s.name: repr(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)},
        "torch_threads": torch.get_num_threads(),
        "served": handoff.served,
    }


def main(argv: list[str]) -> None:
    action = argv[0]
    if action == "observe":
        print(json.dumps(observe()))
    elif action == "imported":
        from snakeddp.util import handoff

        print(json.dumps({"served": handoff.served, "torch": BEGAN_WITH_TORCH}))
    elif action == "exit":
        sys.exit(int(argv[1]))
    elif action == "_exit":
        os._exit(int(argv[1]))
    elif action == "raise":
        raise RuntimeError("the step failed")
    elif action == "kill":
        os.kill(os.getpid(), signal.Signals[argv[1]])
        time.sleep(5)
    elif action == "wait":  # counts SIGUSR1 (in PIDFILE.usr1), stops on SIGTERM (exit 75) or Ctrl-C (KeyboardInterrupt)
        got = []

        def usr1(signum: int, frame: object) -> None:
            got.append(signum)
            with open(f"{argv[1]}.usr1", "w") as counted:
                counted.write(str(len(got)))

        signal.signal(signal.SIGUSR1, usr1)
        signal.signal(signal.SIGTERM, lambda s, f: sys.exit(f"SIGTERM after {len(got)} SIGUSR1"))
        with open(argv[1], "w") as pidfile:
            pidfile.write(str(os.getpid()))
        print("ready", flush=True)
        deadline = time.monotonic() + float(argv[2] if len(argv) > 2 else 60)
        while time.monotonic() < deadline:
            time.sleep(0.05)
        print(f"done after {len(got)} SIGUSR1", flush=True)
    elif action == "count":  # counts SIGINT and SIGTERM until a second after the first
        from snakeddp.util import relays

        got = {signal.SIGINT: 0, signal.SIGTERM: 0}

        def count(signum: int, frame: object) -> None:
            got[relays.stop_for(signum)] += 1

        # A closed terminal's SIGHUP counts as SIGTERM, as a job's top process takes it (snakeddp.launch).
        for signum in relays.with_hangup(tuple(got)):
            signal.signal(signum, count)
        with open(argv[1], "w") as pidfile:
            pidfile.write(str(os.getpid()))
        print("ready", flush=True)
        while not any(got.values()):
            time.sleep(0.05)
        time.sleep(1.0)
        print(f"{got[signal.SIGINT]} SIGINT {got[signal.SIGTERM]} SIGTERM", flush=True)
    else:
        sys.exit(f"unknown action {action}")


if __name__ == "__main__":
    main(sys.argv[1:])
