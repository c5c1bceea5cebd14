"""Reports: run tables, figures and the HTML page built from the runs' provenance.

May import: ``cluster``, ``compat``, ``config``, ``contract``, ``data``, ``environment``, ``errors``, ``forking``,
``platforms``, ``provenance``, ``run``, ``training``, ``util``, ``warm`` (the floors below its own:
tests/test_floors.py).
"""
