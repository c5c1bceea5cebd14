"""azureml-core's private parts that the SDK v1 run configuration relies on; imported by
``snakeddp.azureml.spec_v1``, after the SDK."""

from __future__ import annotations

from typing import Any

from snakeddp.compat import check_package

check_package("azureml-core")


def output_data(output: Any) -> Any:
    """The run configuration's ``OutputData`` of an ``OutputFileDatasetConfig``: what a pipeline step's
    submission builds, which a saved ``job.runconfig`` needs and no public call returns."""
    return output._to_output_data()
