"""The workflow's steps as one plain script, run one after another: the end-to-end baseline.

    python -m bench.baselines.plain_pipeline config.yaml      (in the directory that gets results/)

Same package functions and the same launch command as the rules, without Snakemake: no DAG,
no parallel jobs, no rerun of only what changed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.datasets import ensure_dataset
from bench.harness import REPO
from snakeddp import config as configuration
from snakeddp.environment.capture import capture
from snakeddp.report.table import write_runs_table
from snakeddp.run.runfile import RunFile
from snakeddp.run.runs import runs_from_provenance


def main(configfile: str) -> None:
    runs = configuration.expand_sweep(configuration.load(configfile))
    manifests = {}
    for run in runs.values():
        data = run["config"]["data"]
        manifests[configuration.dataset_id(data)] = ensure_dataset(Path("results/data"), data)
    environment = Path("results/envs/train.json")
    capture(stage="train", lock_path=REPO / "envs" / "requirements.lock", out_path=environment)
    provenance = []
    for run_id, run in runs.items():
        run_dir = Path("results/runs") / run_id
        RunFile(run_id=run_id, config=run["config"], point=run["point"]).write(run_dir / "run.yaml")
        manifest = manifests[configuration.dataset_id(run["config"]["data"])]
        log = Path("logs/train") / f"{run_id}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "snakeddp.launch", "--platform", "local", "--config", str(run_dir / "run.yaml")]
        argv += ["--run-dir", str(run_dir), "--data", str(manifest), "--environment-record", str(environment)]
        with log.open("w") as output:
            subprocess.run(
                argv,
                stdout=output,
                stderr=subprocess.STDOUT,
                check=True,
            )
        provenance.append(run_dir / "provenance.json")
    write_runs_table(runs_from_provenance(provenance), "results/report/runs.csv")


if __name__ == "__main__":
    main(sys.argv[1])
