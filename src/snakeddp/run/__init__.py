"""One run: its run.yaml, the state of its attempts (resume key, lock), and the ``SNAKEDDP_*``
variables through which the workflow passes settings that are not part of a run's identity.

May import: ``compat``, ``config``, ``contract``, ``data``, ``environment``, ``errors``, ``forking``, ``platforms``,
``util`` (the floors below its own: tests/test_floors.py).
"""
