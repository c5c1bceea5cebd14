"""Imported first by every process that trains (snakeddp.train; the warm process's preload): torchmetrics
without the optional packages its own import would pull in (snakeddp.training.lean_imports), before Lightning
imports it with all of them."""

from snakeddp.training.lean_imports import import_torchmetrics

import_torchmetrics()
