"""Ending a helper process this one started (the warm process, the shared Spark application)."""

from __future__ import annotations

import subprocess


def stop(process: subprocess.Popen, timeout: float) -> None:
    """SIGTERM, which it answers by stopping what it runs; SIGKILL after ``timeout`` seconds."""
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
