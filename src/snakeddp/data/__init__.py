"""Datasets as checksummed partition files, and the DataModule that trains on one per epoch."""
