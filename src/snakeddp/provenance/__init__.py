"""Provenance: the record a run writes of what it was made from, its schema, the redaction that
keeps secrets out of it, and the checks and comparisons made from it afterwards.

May import: ``cluster``, ``compat``, ``config``, ``contract``, ``data``, ``environment``, ``errors``, ``forking``,
``platforms``, ``run``, ``util``, ``warm`` (the floors below its own: tests/test_floors.py).
"""
