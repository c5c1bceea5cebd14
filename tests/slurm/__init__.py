"""Tests against a real local Slurm cluster (conftest.py starts it; marked ``slurm``)."""
