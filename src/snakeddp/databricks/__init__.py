"""Databricks Jobs: a run's training submitted as a one-time run (``runs/submit``) through databricks-sdk,
its spec built from the SDK's own request classes (``spec``) and checked offline, as the AzureML specs are."""

#: The platform's name: its row in snakeddp.platforms, its folder under a run directory.
PLATFORM = "databricks"
