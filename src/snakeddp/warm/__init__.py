"""Warm starts of the local workflow's jobs: one process per Snakemake invocation imports torch,
Lightning, numpy and snakeddp once, and every step of the workflow is forked from it.

``process`` starts and stops that process from Snakemake's (the Snakefile's onstart), ``server``
is the process itself, ``client`` is what a step's ``python -m snakeddp...`` command runs first (it
hands the job over and waits for it), and ``protocol`` is what the two say to each other. A node's
training ranks are forked the same way by snakeddp's supervisor (snakeddp.cluster.warm).
"""
