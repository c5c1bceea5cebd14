"""Warm starts of the local workflow's jobs: one process per Snakemake invocation imports torch,
Lightning, numpy and snakeddp once, and every step of the workflow is forked from it.

``process`` starts and stops that process from Snakemake's (the Snakefile's onstart) and ``__main__``
is the process itself (``python -m snakeddp.warm``). What a step's ``python -m snakeddp...`` command
runs first (it hands the job over and waits for it), and what the two say to each other, is
``snakeddp.util.handoff``: on the ground floor, since every step and snakeddp's supervisor import it
before anything else. A node's training ranks are forked the same way by snakeddp's supervisor
(snakeddp.cluster.warm).

May import: ``cluster``, ``compat``, ``config``, ``contract``, ``data``, ``environment``, ``errors``, ``forking``,
``platforms``, ``run``, ``util`` (the floors below its own: tests/test_floors.py).
"""
