"""What the tests share besides fixtures: the repository, tiny configs, datasets and run files as
the workflow writes them, subprocess environments, and the real Snakemake CLI in a scratch
directory (``bench.workflows.WorkflowDir``, which bench uses too, with checked runs added here).
Imported as ``tests.helpers``.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import psutil
import yaml

from bench.harness import REPO as REPO  # the repository's root, for the tests too
from bench.harness import SRC
from bench.workflows import WorkflowDir
from snakeddp import config as configuration
from snakeddp.config import sources
from snakeddp.data.generate import write_dataset_manifest, write_synthetic
from snakeddp.provenance.schema import validate_file
from snakeddp.run.layout import LOCK
from snakeddp.run.runfile import RunFile
from snakeddp.run.variables import import_path
from tests import forked_snakemake, workflow_venv

TINY = {
    "data": {"num_train_files": 3, "num_records_per_train_file": 300, "num_val_records": 200, "num_features": 8},
    "model": {"hidden_sizes": [16]},
    "trainer": {"max_epochs": 3, "batch_size": 32},
    # cpu, not auto: on a GPU host the CPU suite still trains with gloo (two ranks on one GPU would fail).
    "launch": {"mem_mb": 1000, "runtime": 10, "accelerator": "cpu"},
}

# Secret-looking values in the environment of the shared sweep below; none may reach results/ or logs/.
SECRETS = {
    "AZURE_CLIENT_SECRET": "azure-client-secret-3f9c",
    "WANDB_API_KEY": "wandb-api-key-81be0c",
    "MY_TOKEN": "my-token-value-5d21",
    "NCCL_PROXY_URL": "https://alice:nccl-url-password-77aa@proxy.invalid:3128/",
    "SLURM_SPOOL_URL": "https://bob:slurm-url-password-90ff@spool.invalid/x",
    # A site's Slurm REST token, and a token under a name no word list knows.
    "SLURM_JWT": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzbHVybS1qd3QtNjFkMCJ9.c2lnLXNsdXJtLWp3dA",
    "NCCL_COLLNET_BLOB": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJuY2NsLWJsb2ItMmM0ZSJ9.c2lnLW5jY2wtYmxvYg",
}
# Storage keys as Spark and Databricks users keep them in the config's free-form maps, under dotted
# Spark names (harmless settings for a cluster that does not use them); a secret reference is kept.
SPARK_CONF_SECRETS = {
    "spark.hadoop.fs.s3a.secret.key": "s3a-secret-key-6b1d",
    "spark.hadoop.fs.azure.account.key.lakeacct.dfs.core.windows.net": "azure-account-key-92ce",
    "spark.authenticate.secret": "spark-auth-secret-0a7f",
}
CLUSTER_CONF_SECRETS = {
    "spark.hadoop.fs.s3a.session.token": "s3a-session-token-c4e8",
    "spark.hadoop.fs.azure.sas.lake.lakeacct.blob.core.windows.net": "sv=2024-08&sig=azure-sas-sig-5d3a",
    "spark.ssl.keyStorePassword": "keystore-password-71f0",
    "spark.hadoop.fs.gs.auth.service.account.private.key": "{{secrets/ml/gcs-key}}",
}
STORAGE_KEY_VALUES = (*SPARK_CONF_SECRETS.values(), *list(CLUSTER_CONF_SECRETS.values())[:3])
# A secret that every quoting writes differently (a double quote, a backslash, a single quote, a non-ASCII
# letter), under a secret-looking key and again under harmless ones; and values already known to be secret
# (a storage key, an environment credential) repeated under harmless keys: masked by value.
QUOTED_SECRET = "q\"uo\\ted'-secret-\u00e97c3"
BY_VALUE_SECRETS = {
    "spark.ssl.trustStorePassword": QUOTED_SECRET,
    "spark.app.comment": QUOTED_SECRET,
    "spark.app.label": SPARK_CONF_SECRETS["spark.authenticate.secret"],
    "spark.app.owner": SECRETS["MY_TOKEN"],
}
# Credentials in the config itself: network.env is recorded (redacted), the config file copied into
# the crate, and spark.conf and databricks.new_cluster.spark_conf carry storage keys.
CONFIG_SECRET = {
    "network": {"env": {"UCX_PROXY_URL": "https://carol:config-url-password-4e1b@proxy.invalid/"}},
    "spark": {"conf": {**SPARK_CONF_SECRETS, **BY_VALUE_SECRETS}},
    "databricks": {"new_cluster": {"spark_version": "16.4.x-cpu-ml-scala2.12", "node_type_id": "Standard_D4ds_v5",
                                   "spark_conf": CLUSTER_CONF_SECRETS}},
}  # fmt: skip
SECRET_VALUES = ("azure-client-secret-3f9c", "wandb-api-key-81be0c", "my-token-value-5d21",
                 "nccl-url-password-77aa", "slurm-url-password-90ff", "config-url-password-4e1b",
                 "eyJzdWIiOiJzbHVybS1qd3QtNjFkMCJ9", "eyJzdWIiOiJuY2NsLWJsb2ItMmM0ZSJ9",
                 *STORAGE_KEY_VALUES, QUOTED_SECRET)  # fmt: skip
SWEEP = {**TINY, "sweep": {"launch.devices": [1, 2]}}


def written_forms(value: str) -> set[str]:
    """``value`` as any writer of a record, a log or a command line may write it: as is, in JSON (escaped,
    ASCII or not), in YAML (plain, single- or double-quoted), shell-quoted, URL-encoded, as Python's repr and
    its unicode escapes. A secret found in none of them was not written."""
    forms = {
        value,
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        repr(value)[1:-1],
        value.encode("unicode_escape").decode(),
        shlex.quote(value),
        quote(value, safe=""),
        quote(value),
        quote_plus(value),
        yaml.safe_dump(value, default_style='"').strip(),
        yaml.safe_dump(value, default_style="'").strip(),
        yaml.safe_dump(value, allow_unicode=True).strip().removesuffix("...").strip(),
    }
    return {form for form in forms if form}


def leaked(text: str | bytes, values: Iterable[str]) -> list[str]:
    """The secret ``values`` that ``text`` holds in any written form."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return [value for value in values if any(form in text for form in written_forms(value))]


def write_dataset(directory: Path, data: dict[str, Any]) -> Path:
    """A synthetic dataset under ``directory`` as the data rules write it; returns its manifest."""
    params = sources.identity(data)
    entries = []
    for index in range(data["num_train_files"]):
        part = directory / "train" / f"part-{index:05d}"
        write_synthetic(params, "train", index, part.with_suffix(".safetensors"), part.with_suffix(".json"))
        entries.append(part.with_suffix(".json"))
    write_synthetic(params, "val", 0, directory / "val.safetensors", directory / "val.json")
    manifest = directory / f"manifest-{len(entries)}.json"
    write_dataset_manifest(manifest, configuration.dataset_id(data), params, entries, directory / "val.json")
    return manifest


def make_run(root: Path, config: dict, run_id: str = "base") -> tuple[Path, Path]:
    """A dataset and a run.yaml under ``root/results`` as the workflow writes them: (run.yaml, manifest)."""
    resolved = configuration.validate(config)
    data = resolved["data"]
    manifest = write_dataset(root / "results" / "data" / configuration.dataset_id(data), data)
    run_yaml = root / "results" / "runs" / run_id / "run.yaml"
    RunFile(run_id=run_id, config=configuration.run_config(resolved)).write(run_yaml)
    return run_yaml, manifest


def merged(base: dict, overrides: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        out[key] = merged(out.get(key, {}), value) if isinstance(value, dict) and key in out else value
    return out


def tiny_with(overrides: dict) -> dict:
    """TINY with ``overrides`` merged in; a user's model (model.target) replaces TINY's built-in one
    whole, as its built-in keys (hidden_sizes) would be refused beside model.target, and a table or
    DataModule source leaves TINY's generator keys out, refused beside them likewise."""
    out = merged(TINY, overrides)
    if (overrides.get("model") or {}).get("target"):
        out["model"] = copy.deepcopy(overrides["model"])
    return without_generator_keys(out, overrides)


def without_generator_keys(cfg: dict, overrides: dict) -> dict:
    """``cfg`` (TINY with ``overrides``) without TINY's generator keys where the data is a table's or a
    DataModule's: refused beside them (config.sources.SYNTHETIC_ONLY), unless the overrides set them."""
    if cfg["data"].get("source", "synthetic") != "synthetic":
        for key in set(sources.SYNTHETIC_ONLY) - set(overrides.get("data", {})):
            cfg["data"].pop(key, None)
    return cfg


def prepare(tmp_path: Path, overrides: dict, run_id: str = "base") -> tuple[Path, Path | None, Path]:
    """run.yaml, manifest (synthetic data only) and run directory of a TINY-based run under ``tmp_path``."""
    cfg = configuration.validate(tiny_with(overrides))
    synthetic = cfg["data"]["source"] == "synthetic"
    manifest = write_dataset(tmp_path / "data", cfg["data"]) if synthetic else None
    run_yaml = tmp_path / "run.yaml"
    RunFile(run_id=run_id, config=configuration.run_config(cfg)).write(run_yaml)
    return run_yaml, manifest, tmp_path / "runs" / run_id


def as_the_train_rule(env: dict[str, str]) -> tuple[str, str]:
    """The interpreter and PYTHONPATH the train rule starts ``python -m snakeddp.launch`` with: the workflows' venv's
    (tests.workflow_venv) and their jobs' import path, whose kept warm process forks the launch (it declines the
    tests' own interpreter and PYTHONPATH, and the run would start cold)."""
    return str(workflow_venv.bin_dir() / "python"), import_path(str(SRC), env)


def launch(
    run_yaml: Path,
    manifest: Path,
    run_dir: Path,
    cwd: Path,
    timeout: float = 600,
    kept_warm: bool = False,
    **env: str,
) -> subprocess.CompletedProcess:
    """``python -m snakeddp.launch`` on the local platform, as the train rule runs it (``kept_warm``: with its
    interpreter and import path too, ``as_the_train_rule``; this interpreter's by default)."""
    environment = subprocess_env(**env)
    python = sys.executable
    if kept_warm:
        python, environment["PYTHONPATH"] = as_the_train_rule(environment)
    argv = [python, "-m", "snakeddp.launch", "--platform", "local", "--config", str(run_yaml)]
    argv += ["--run-dir", str(run_dir), "--data", str(manifest)]
    return subprocess.run(argv, cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout, check=False)


# Set (to "1") by tests/conftest.py while a test marked gpu runs: its processes may see the GPUs.
GPU_TEST = "SNAKEDDP_GPU_TEST"


def azureml_v1_installed() -> bool:
    """Whether azureml-core (the AzureML SDK v1) is importable: in .venv-azureml-v1 only."""
    try:
        return importlib.util.find_spec("azureml.core") is not None
    except ModuleNotFoundError:  # no azureml namespace at all
        return False


def left_running(directory, within: float) -> list[str]:
    """Processes working in ``directory`` (jobs, ranks, the warm process, clients) still there after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        left = []
        for process in psutil.process_iter(["cmdline", "cwd", "status"]):
            cwd = process.info["cwd"] or ""
            if cwd.startswith(str(directory)) and process.info["status"] != psutil.STATUS_ZOMBIE:
                left.append(" ".join(process.info["cmdline"] or [])[:120])
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def training_processes(run_dir: Path) -> list[psutil.Process]:
    """A run's training processes, oldest first (the supervisor starts its ranks in rank order): every one
    holds the run directory's attempt lock while it lives (snakeddp.run.attempt)."""
    lock = str((Path(run_dir) / LOCK).resolve())
    found = []
    for process in psutil.process_iter():
        try:
            if any(opened.path == lock for opened in process.open_files()):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return sorted(found, key=lambda process: process.create_time())


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for processes the tests start: this checkout's package, one thread each, and
    no GPU unless the test is marked gpu (the CPU suite trains with gloo on a GPU host too)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMIX_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    if env.get(GPU_TEST) != "1":
        env["CUDA_VISIBLE_DEVICES"] = ""
    # OpenMPI refuses to run as root unless told it may (the test machines run as root).
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update(extra)
    return env


def assert_valid_provenance(directory: Path, require: bool = True) -> list[dict]:
    """Validate every provenance.json under ``directory`` against provenance.schema.json.

    Call it from any test that runs training; ``Workflow.run`` already does after each run.
    """
    files = sorted(Path(directory).glob("runs/*/provenance.json"))
    if require:
        assert files, f"no provenance.json under {directory}"
    return [validate_file(path) for path in files]


class Workflow(WorkflowDir):
    """A Snakemake working directory outside the repository, driven through the real CLI; a run fails
    the test when snakemake does, and every provenance.json it leaves is checked against the schema."""

    #: The environment every run of this directory gets unless a test gives another (subprocess_env()'s when None).
    env: dict | None = None

    def __init__(self, directory: Path, profile: str = "local", checkout: Path = REPO) -> None:
        super().__init__(directory, profile, checkout)
        #: The bin/ of the venv it runs in, the test's when it is made (tests.workflow_venv): a state a fixture
        #: built runs, and is verified, in the venv it was built in, whichever test reads it.
        self.bin = workflow_venv.bin_dir()

    def command(self, *args: str) -> list[str]:
        return [str(self.bin / "python"), *super().command(*args)[1:]]

    def run(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 900,
        env: dict | None = None,
        wrap: Callable[[list[str]], list[str]] | None = None,
    ) -> subprocess.CompletedProcess:
        """``wrap``: what runs the command instead of running it directly (tests.gpu_standin's namespace, which a
        forked run enters itself: its ``mounts``)."""
        command = self.command(*args)
        env = env or self.env or subprocess_env()
        # Forked from a process that imported Snakemake once (tests.forked_snakemake); of the wraps, only one that
        # names the mounts it enters (a stand-in machine's) can be reproduced there, any other starts cold.
        mounts = getattr(wrap, "mounts", None)
        done = None
        if wrap is None or mounts is not None:
            done = forked_snakemake.run(command, self.directory, env, timeout, mounts)
        if done is None:
            done = subprocess.run(
                wrap(command) if wrap else command,
                cwd=self.directory,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        if check and done.returncode != 0:
            raise AssertionError(
                f"snakemake {' '.join(args)} failed ({done.returncode}):\n{done.stdout[-5000:]}\n{done.stderr[-5000:]}"
            )
        # Every provenance.json an end-to-end run leaves behind must match the schema.
        assert_valid_provenance(self.directory / "results", require=False)
        return done

    def planned_jobs(self, *args: str, env: dict | None = None) -> dict[str, int]:
        """Rule -> job count of a dry run (empty when there is nothing to do)."""
        done = self.run("--dry-run", "--quiet=rules", *args, env=env)  # =: no target taken as a quietness
        return job_counts(done.stdout + done.stderr)


def job_counts(output: str) -> dict[str, int]:
    """Rule -> job count of the table a dry run prints (empty when there is nothing to do): a test that also
    reads which runs' jobs are planned reads both from one `snakemake -n`."""
    counts: dict[str, int] = {}
    in_table = False
    for line in output.splitlines():
        parts = line.split()
        if line.startswith("-----"):
            in_table = True
            continue
        if in_table and len(parts) == 2 and parts[1].isdigit():
            if parts[0] == "total":
                break
            counts[parts[0]] = int(parts[1])
    return counts


def copy_of(flow: Workflow, directory: Path) -> Workflow:
    """A copy of ``flow``'s working directory (mtimes kept, links as links) driven like it: the state a
    module fixture built once, for a test that damages or changes it. Snakemake's records in .snakemake/
    are keyed by paths relative to the directory, so a copy of a finished pipeline is "Nothing to be done"."""
    shutil.copytree(flow.directory, directory, symlinks=True)
    copied = Workflow(directory, flow.profile.name)
    copied.env, copied.bin = flow.env, flow.bin
    return copied


def alias_bomb(levels: int, key: str = "model") -> str:
    """A YAML document of a few hundred bytes whose aliases expand to 10**(levels+1) values."""
    lines = ["a0: &a0 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join([*lines, f"{key}: {{kwargs: {{x: *a{levels}}}}}"])


def all_gone(pids: list[int], within: float) -> bool:
    """Whether every process in ``pids`` has ended (a zombie waiting for its parent counts) within ``within`` s."""

    def running(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + within
    while any(running(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (CI's time limit, a killed test run) raises KeyboardInterrupt meanwhile, so that the
    ``finally`` of a fixture that started real daemons (a Slurm or Spark cluster) still stops them."""

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def typed_status(checkout: Path) -> dict:
    """`snakeddp status --json` typed in ``checkout``, its one run's row."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "snakeddp"), "status", "--json"],
        cwd=checkout, env=subprocess_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and not done.stderr, done.stdout + done.stderr
    (row,) = json.loads(done.stdout)
    return row


@contextlib.contextmanager
def tmpfs(folder: Path, options: str) -> Iterator[Path]:
    """A real tmpfs of its own at ``folder`` (made if need be; ``options``: ``size=16m``, ``ro,size=1m``), as root
    mounts one: a disk that fills, or one that cannot be written; unmounted afterwards."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", folder], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", folder], check=True)


def as_typed_in_a_terminal() -> None:
    """SIGINT's and SIGHUP's defaults, as a terminal's shell starts a command (a Popen's preexec_fn): under nohup or
    a script's `&` the tests inherit them ignored, which Snakemake keeps (snakeddp.workflow.interrupt), and a shell
    cannot trap or reset a signal ignored on entry."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def blocked_in(thread: threading.Thread) -> set[int]:
    """The signals ``thread`` blocks, from its task's SigBlk mask in /proc."""
    for line in Path(f"/proc/self/task/{thread.native_id}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            mask = int(line.split()[1], 16)
            return {signum for signum in range(1, 65) if mask >> (signum - 1) & 1}
    raise AssertionError("no SigBlk line")
