"""Environments: the pip locks, the stage files derived from them (conda YAMLs, Dockerfile), the
record of what each stage ran in, and the container image build.

    python -m snakeddp.environment.lock verify envs/requirements.lock
    python -m snakeddp.environment.files check

May import: ``compat``, ``config``, ``errors``, ``forking``, ``platforms``, ``util`` (the floors below its
own: tests/test_floors.py).
"""
