"""A run trained on another platform's machines (AzureML, Databricks), both sides owned once: the submitter's
sequence every remote train job follows (``job.RemoteJob``), the folder of what it stages (``folder``: the code
snapshot among it), what moves between that folder and the run directory (``attempt``), what every job inherits
(``inherited``), and the one command the job runs there (``entry``: seed the resumed attempt, then train). A
platform supplies only its own steps; none imports another.

May import: ``cluster``, ``compat``, ``config``, ``contract``, ``data``, ``environment``, ``errors``, ``forking``,
``platforms``, ``provenance``, ``report``, ``run``, ``training``, ``util``, ``warm`` (the floors below its
own: tests/test_floors.py).
"""
