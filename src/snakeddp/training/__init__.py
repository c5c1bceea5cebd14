"""Training: the Lightning Trainer of a run, its strategy, callbacks, models, trackers, and user classes.

Imported by the training processes only (``snakeddp.train``); everything here may import torch and
Lightning.

May import: ``cluster``, ``compat``, ``config``, ``contract``, ``data``, ``environment``, ``errors``, ``forking``,
``platforms``, ``provenance``, ``run``, ``util``, ``warm`` (the floors below its own: tests/test_floors.py).
"""
