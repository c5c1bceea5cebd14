"""One run: its run.yaml, the state of its attempts (resume key, lock), and the ``SNAKEDDP_*``
variables through which the workflow passes settings that are not part of a run's identity.
"""
