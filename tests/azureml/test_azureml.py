"""The Azure SDKs are an optional extra: nothing outside the submitter ever imports them.

Each check runs in a fresh interpreter whose imports of azure / azureml fail, as in an install
without the azureml extra (or inside an AzureML job, whose environment does not have them).
"""

import subprocess
import sys
import textwrap

from tests.helpers import TINY, make_run, subprocess_env

BLOCK_AZURE = textwrap.dedent(
    """
    import sys

    class BlockAzure:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("azure", "azureml"):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")

    sys.meta_path.insert(0, BlockAzure())
    """
)


def run_blocked(code, *argv, cwd=None):
    return subprocess.run(
        [sys.executable, "-c", BLOCK_AZURE + textwrap.dedent(code), *argv],
        cwd=cwd,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_blocker_really_blocks():
    done = run_blocked("import azure.ai.ml")
    assert done.returncode != 0 and "blocked by the test" in done.stderr


# Everything the local and Slurm profiles run, the in-job entry, and the submitter (whose SDK
# imports wait until a spec is written or a job submitted).
MODULES = [
    "snakeddp.launch",
    "snakeddp.train",
    "snakeddp.cluster",
    "snakeddp.provenance.record",
    "snakeddp.cli",
    "snakeddp.data.generate",
    "snakeddp.report.table",
    "snakeddp.remote.entry",
    "snakeddp.azureml.submit",
]


def test_modules_import_without_the_sdks():
    done = run_blocked(
        f"""
        import importlib, sys
        for module in {MODULES!r}:
            importlib.import_module(module)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("azure", "azureml"))
        assert not loaded, loaded
        """
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_local_launch_never_touches_the_sdks(tmp_path):
    cfg = {**TINY, "launch": {**TINY["launch"], "devices": 2}}
    run_yaml, manifest = make_run(tmp_path, cfg)
    done = run_blocked(
        """
        import runpy, sys
        sys.argv = ["snakeddp.launch", *sys.argv[1:]]
        try:
            runpy.run_module("snakeddp.launch", run_name="__main__")
        finally:
            assert not [m for m in sys.modules if m.split(".")[0] in ("azure", "azureml")]
        """,
        *("--platform", "local", "--config", str(run_yaml), "--run-dir", str(run_yaml.parent)),
        *("--data", str(manifest), "--dry-run"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "snakeddp.cluster.supervisor" in done.stdout and "--nproc-per-node=2" in done.stdout
