"""snakeddp's tests, laid out like the package: ``tests/<package>/test_<module>.py`` tests
``src/snakeddp/<package>/<module>.py`` (``test_<package>.py`` the package as a whole), and the tests
of the entry points (``cli``, ``errors``) and of ``bench/``, ``examples/`` and ``profiles/`` sit at
the top. ``tests/rules/`` tests the workflow's rules (``rules/*.smk``) through Snakemake;
``tests/e2e/`` and ``tests/slurm/`` run the whole workflow.

Every folder is a package, so test modules of the same name in different folders (``data`` and
``report`` each have a ``test_table``) are distinct modules, ``tests.data.test_table`` and
``tests.report.test_table``, and a test module is imported under one name only.
"""
