"""The local platform: every job runs on this machine beside Snakemake, and a train job starts its ranks
with snakeddp's supervisor (or torchrun, mpirun). ``platform``: the contract (snakeddp.contract):
one node only, the GPUs this machine shows, and as many cores as a run starts processes.

May import: ``cluster``, ``compat``, ``config``, ``contract``, ``data``, ``environment``, ``errors``, ``forking``,
``platforms``, ``provenance``, ``remote``, ``report``, ``run``, ``training``, ``util``, ``warm`` (the floors
below its own: tests/test_floors.py).
"""

#: The platform's name: its row in snakeddp.platforms.
PLATFORM = "local"
