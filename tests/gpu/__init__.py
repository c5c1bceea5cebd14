"""GPU checks (pytest -m gpu), deselected by default."""
