"""The azureml platform's contract: its section, SDK, compute and image checked before any job; a train
job submits the run as an AzureML job and follows it (snakeddp.azureml.submit)."""

from __future__ import annotations

import argparse
from pathlib import Path

from snakeddp import platforms
from snakeddp.azureml import PLATFORM
from snakeddp.contract import Invocation, PreflightError, RemotePlatform, Stateless


class AzureML(RemotePlatform[Stateless]):
    row = platforms.row(PLATFORM)

    def check(self, invocation: Invocation[Stateless]) -> None:
        config = invocation.config
        if PLATFORM not in invocation.declared:
            raise PreflightError(
                "the azureml profile needs an azureml: section (workspace, compute), and the config has none. "
                "HINT: copy the commented azureml: example from config/config.yaml into your config and fill in "
                "your workspace and compute (docs/azureml.md)."
            )
        # Imported here: the submitter's modules cost every other profile's dry run about 0.15 s.
        from snakeddp.azureml.settings import AzureMLError, Settings
        from snakeddp.azureml.staging import environment_spec
        from snakeddp.azureml.submit import require_sdk

        try:
            settings = invocation.settings_as(Settings).resolved(Path.cwd())
            require_sdk(settings.sdk)
            settings.require_compute()
            # The job's software as the train job builds it (the image's CUDA against torch's build, a registered
            # environment named, a build that is locked): checked before any job, where a refusal in the train job
            # came after Snakemake had removed the run's provenance.json.
            environment_spec(settings, config["environment"]["cuda"])
            if settings.submit:
                settings.require_workspace()
        except AzureMLError as error:
            raise PreflightError(str(error)) from None

    def submit(self, args: argparse.Namespace) -> int:
        from snakeddp.azureml.submit import main  # the azureml extra, imported only here

        return main(args)


CONTRACT = AzureML()
