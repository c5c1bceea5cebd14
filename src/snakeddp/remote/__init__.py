"""A run trained on another platform's machines (AzureML, Databricks): the sequence every remote train job
follows, owned once (``job.RemoteJob``), the folder of what it stages (``folder``), and what moves between
that folder and the run directory (``attempt``). A platform supplies only its own steps; none imports another."""
