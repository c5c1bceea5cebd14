# The two commands of the README, and the checks CI runs.
#   make run    set up .venv from the locks, then run the whole pipeline on the local profile
#   make test   set up .venv (with test tools) and system packages, lint, run every test
.PHONY: run test lint pytest pytest-cold durations bench setup setup-dev system-packages newest gpu-check

VENV := .venv
BIN := $(VENV)/bin

run: setup
	$(BIN)/snakemake --profile profiles/local

test: setup-dev system-packages lint pytest

lint: setup-dev
	$(BIN)/ruff check src scripts tests bench tools examples
	$(BIN)/ruff format --check src scripts tests bench tools examples
	$(BIN)/snakefmt --check Snakefile rules
	$(BIN)/python -m snakeddp.environment.files check
	$(BIN)/python -m snakeddp.environment.advisories check envs/*.lock --pyproject pyproject.toml
	$(BIN)/python -m snakeddp.environment.advisories audit envs/requirements.lock envs/requirements-dev.lock envs/requirements-azureml-v1.lock
	$(BIN)/hadolint envs/Dockerfile
	$(BIN)/snakemake --lint --profile profiles/local

# --durations: the 40 slowest tests, and (tests/conftest.py) the 25 files that spent the most CPU, so every CI
# log says where the suite's time goes (on 2 busy cores its time is its CPU).
# Three workers on CI's 2 cores: two for the CPU, and the third runs only the Slurm files (tests/lanes.py), which
# wait on the scheduler, on cold ranks and on hang bounds more than they compute; with two workers the one holding
# a Slurm file left its core mostly idle. WORKERS=4 gives the Slurm files two lanes, each on a cluster of its own,
# for a machine where one lane lasts as long as the CPU workers' share of the rest; on 2 busy cores two lanes
# ended the run no sooner and cost 2% more CPU. --dist loadfile keeps each test file on one worker,
# in order, so a module fixture is built once and tests that build on an earlier test's state
# (tests/e2e/test_search.py) see it; a session fixture is built once per worker. (loadgroup would
# group finer, but with pytest 9.2 xdist 3.8 silently ignores its groups: pytest-xdist#1386.)
# WORKERS=0 runs every test in this process, one at a time. The files go out longest first
# (tests/durations.json, tests/conftest.py), not xdist's most-tests-first: the last files the two CPU workers
# take are short, so they finish at about the same time.
# --cold-unless-e2e: the tests not marked e2e, slurm or gpu start their jobs and ranks cold (SNAKEDDP_WARM_START=0),
# the end-to-end ones warm, as users run: each path is taken, and no test runs twice (make pytest-cold reruns the
# fast tests cold by hand).
WORKERS ?= 3
pytest: setup-dev
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadfile --no-loadscope-reorder --durations=40 --cold-unless-e2e

# tests/durations.json again, from a whole run of the suite (after adding or speeding up a slow test file).
durations: setup-dev
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadfile --no-loadscope-reorder --cold-unless-e2e --write-durations -q

# The fast tests (not e2e, not Slurm) again with every job and rank started cold: the local profile
# forks them from a warm process by default (snakeddp.warm), which SNAKEDDP_WARM_START=0 turns off.
pytest-cold: setup-dev
	SNAKEDDP_WARM_START=0 $(BIN)/python -m pytest -n $(WORKERS) --dist loadfile --no-loadscope-reorder -m "not e2e and not slurm and not gpu"

# The newest releases pyproject.toml's ranges allow (torch held at the lock's), in .venv-newest, and the fast tests.
newest:
	tools/newest.sh

bench: setup-dev
	$(BIN)/python -m bench

# First thing on a lent GPU machine, with the machine's own torch (tools/gpu-check.sh: the default workflow,
# pytest -m gpu, bench gpu; 300 s or less on one GPU). Here first: tools/gpu-check.sh --prepare, and carry .gpu-check.
OUT ?= .gpu-check/out
gpu-check:
	tools/gpu-check.sh $(OUT)

# SETUP_PYTHON: the interpreter a new venv is made from (tools/setup.sh's PYTHON; when unset, the first of python3.11,
# python3.12, python3.13 and python3 that is one the locks are for: tools/python.sh). Only the set-up gets it (make
# setup, make run, make setup-dev and what needs it); a venv made from another Python is refused in one line.
SETUP_ENV := $(if $(SETUP_PYTHON),PYTHON=$(SETUP_PYTHON))

setup:
	$(SETUP_ENV) tools/setup.sh

# The AzureML SDK v1 has a venv of its own (its caps conflict with the dev lock); tests/azureml/test_sdk_v1.py
# runs its tests there.
setup-dev:
	$(SETUP_ENV) tools/setup.sh --dev
	$(SETUP_ENV) tools/setup.sh --azureml-v1

system-packages:
	tools/system-packages.sh
