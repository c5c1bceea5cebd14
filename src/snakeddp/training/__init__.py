"""Training: the Lightning Trainer of a run, its strategy, callbacks, models, trackers, and user classes.

Imported by the training processes only (``snakeddp.train``); everything here may import torch and
Lightning.
"""
