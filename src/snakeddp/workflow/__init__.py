"""What the Snakefile imports while it parses: never torch or Lightning, since every dry run pays for it.

May import: ``cluster``, ``compat``, ``config``, ``contract``, ``data``, ``environment``, ``errors``, ``forking``,
``platforms``, ``provenance``, ``remote``, ``report``, ``run``, ``training``, ``util``, ``warm``; a platform's
package only through ``platforms``' registry (tests/platforms/test_names.py) (the floors below its own:
tests/test_floors.py).
"""
