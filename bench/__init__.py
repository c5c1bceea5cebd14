"""Benchmarks: where snakeddp stands against the tutorial's way and the machine's limits (``python -m bench``)."""
