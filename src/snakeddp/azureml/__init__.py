"""Train on AzureML: every training run becomes one AzureML job, and its results come back.

``python -m snakeddp.launch --platform azureml`` calls ``submit.main``, whose ``AzureMLJob`` supplies the
AzureML steps of the sequence every remote platform follows (``snakeddp.remote.job``). The modules, one job each:

- ``settings``: the ``azureml:`` config section, validated, its workspace resolved;
- ``plan``: what one run's job must do, independent of the SDK (command, layout, inputs);
- ``staging``: the files a job is built from (run.yaml and the environment record beside the code snapshot);
- ``spec_v2`` / ``spec_v1``: the job spec for azure-ai-ml / azureml-core, written and validated offline;
- ``credentials``, ``jobs_v2`` / ``jobs_v1``: talk to Azure (check, upload, submit, stream, download);
- ``submitted``: a submitted job and how it ended.

Every process of the job runs the remote jobs' one entry, ``snakeddp.remote.entry train`` (it seeds a
resumed attempt, then trains), from the code snapshot snakeddp.remote.folder writes.

Only ``spec_*``, ``credentials`` and ``jobs_*`` import the Azure SDKs (the ``azureml`` extra);
nothing in the local or Slurm path imports this package.

May import: ``cluster``, ``compat``, ``config``, ``contract``, ``data``, ``environment``, ``errors``, ``forking``,
``platforms``, ``provenance``, ``remote``, ``report``, ``run``, ``training``, ``util``, ``warm`` (the floors
below its own: tests/test_floors.py).
"""

from snakeddp.errors import ConfigError

#: The platform's name: its row in snakeddp.platforms, its folder under a run directory.
PLATFORM = "azureml"


class AzureMLError(ConfigError, RuntimeError):
    """Something to fix before (or learn after) an AzureML job; the message says what and how."""
