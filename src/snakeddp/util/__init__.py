"""The ground floor: small helpers that every stage uses and that import nothing else of snakeddp's
(files written atomically, hashes, YAML text, terminal lines, a step's hand-off to the warm process,
redaction, number formatting, exit).

May import: ``errors`` (the floors below its own: tests/test_floors.py).
"""
