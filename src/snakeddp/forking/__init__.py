"""Forking from a warm process: what the workflow's warm process (``snakeddp.warm``) and snakeddp's
supervisor (``snakeddp.cluster.warm``) both do, below both of them.

Each imports once what its children would import, checks before every fork that forking is safe,
and forks children that become what ``python -m MODULE ARGS`` would have been, as PySpark's worker
daemon (``pyspark/daemon.py``) does. ``imports``: importing with one-thread pools, frozen out of
garbage collection, and what the imports derived from the environment derived again in a child;
``safety``: whether this process may fork now (one thread, no CUDA, no stray descriptor); ``child``:
the fork, a child's first steps (its session, parent-death signal, a fresh interpreter's signal
handlers, its environment and argv), the module run as ``__main__`` and the exit it makes;
``helper``: a process of Snakemake's that serves its owner's jobs on a socket and dies with Snakemake
(the workflow's warm process, the shared Spark application).

Imports only the standard library and ``snakeddp.util``: a floor below ``cluster`` and ``warm``.

May import: ``compat``, ``errors``, ``platforms``, ``util`` (the floors below its own: tests/test_floors.py).
"""
