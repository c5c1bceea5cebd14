"""azure-ai-ml's private parts that the SDK v2 job spec relies on; imported by ``snakeddp.azureml.spec_v2``,
after the SDK."""

from __future__ import annotations

from typing import IO, Any

from snakeddp.compat import check_package

check_package("azure-ai-ml")


def dump_job(node: Any, stream: IO[str]) -> None:
    """Write the command job that a ``command()`` node stands for, as the SDK dumps it (YAML): no public
    call turns a node into its job."""
    node._to_job().dump(stream)
