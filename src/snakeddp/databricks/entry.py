"""The Databricks task's python_file (staged as <stage>/code/databricks_entry.py): run the run's ranks.

    python databricks_entry.py --variables JSON --workdir STAGE <python -m snakeddp.launch arguments>

It runs on the job cluster's driver, beside the staged snakeddp package: the settings outside the
run's identity (tracking, site, network, spark, the submitter's commit) become variables, it moves
into STAGE (laid out as the workflow's directory, so provenance records the same relative paths as
a local run), then ``snakeddp.launch`` trains as on the spark platform, its ranks started by TorchDistributor on the
cluster's executors. Standard library only until snakeddp is importable from the staged copy.
"""

import json
import os
import runpy
import sys

CODE = os.path.dirname(os.path.abspath(__file__))


def main(argv: list[str]) -> int:
    if argv[:1] != ["--variables"] or argv[2:3] != ["--workdir"] or len(argv) < 4:
        print(
            "databricks_entry.py: usage: --variables JSON --workdir STAGE <snakeddp.launch arguments>", file=sys.stderr
        )
        return 2
    os.environ.update(json.loads(argv[1]))
    os.chdir(argv[3])
    # The ranks and the Spark driver are new interpreters: they find the staged package the same way.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (CODE, os.environ.get("PYTHONPATH")) if p)
    sys.path.insert(0, CODE)
    # `python -m snakeddp.launch ARGS` from here on, in this interpreter (a spark_python_task runs a file):
    # by name, as the command line names it, so the package never imports its own launcher back.
    sys.argv = ["-m", *argv[4:]]
    runpy.run_module("snakeddp.launch", run_name="__main__", alter_sys=True)
    return 0  # not reached: the launcher ends with SystemExit and its code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
