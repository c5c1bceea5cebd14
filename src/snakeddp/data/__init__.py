"""Datasets as checksummed partition files, and the DataModule that trains on one per epoch.

May import: ``compat``, ``config``, ``errors``, ``forking``, ``platforms``, ``util`` (the floors below its
own: tests/test_floors.py).
"""
