"""Benchmarks: where snakeddp stands against the tutorial's way and the machine's limits (``python -m bench``).

``benchmarks/`` holds one module per benchmark, registered in results.md's order
(``benchmarks.BENCHMARKS``); ``baselines/`` the hand-written references they measure against; this
folder's own modules are the machinery they share: ``harness`` (sizes, side-by-side timing,
figures, subprocesses), ``datasets``, ``runs`` (training runs started both ways and watched),
``profiled`` (cProfile in every rank), ``workflows`` (the Snakefile driven in a scratch directory)
and ``azurite`` (the Azure Storage emulator), the last two shared with the tests, and ``report``
(results.md and results.json, next to them).
"""
