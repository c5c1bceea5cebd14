"""Examples importable from the repository root (``examples.tabular.model:TabularNet``)."""
