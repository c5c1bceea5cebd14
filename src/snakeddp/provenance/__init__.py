"""Provenance: the record a run writes of what it was made from, its schema, the redaction that
keeps secrets out of it, and the checks and comparisons made from it afterwards.
"""
