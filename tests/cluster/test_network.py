"""Network tuning (network.env and exported NCCL_/GLOO_/... variables) reaches every rank and provenance."""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest
import yaml

from snakeddp import config
from snakeddp import launch as launching_module
from snakeddp.cluster import network
from snakeddp.workflow import jobenv
from tests.helpers import REPO, launch, prepare

PROBE = """
import json
import os
from pathlib import Path

from snakeddp.training.models import MLP


class EnvProbe(MLP):
    \"\"\"The MLP, writing the network variables each rank sees.\"\"\"

    def on_fit_start(self):
        seen = {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "GLOO_", "UCX_"))}
        Path(self.trainer.default_root_dir, f"env-rank{self.global_rank}.json").write_text(json.dumps(seen))
"""


def test_network_env_becomes_environment_strings():
    cfg = config.validate(
        {"network": {"env": {"NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": 1, "GLOO_SOCKET_IFNAME": "lo"}}}
    )
    assert network.variables(cfg) == {"NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": "1", "GLOO_SOCKET_IFNAME": "lo"}
    assert jobenv.settings(cfg)["NCCL_IB_DISABLE"] == "1"


def test_only_network_families_and_no_secrets():
    with pytest.raises(config.ConfigError, match=r"network.env.HOME: not a network variable\. HINT: "):
        config.validate({"network": {"env": {"HOME": "/tmp"}}})
    secret = r"network.env.{}: looks like a secret, .* HINT: remove it from the config and export {} in the shell"
    with pytest.raises(config.ConfigError, match=secret.format("NCCL_IB_TOKEN", "NCCL_IB_TOKEN")):
        network.variables(config.validate({"network": {"env": {"NCCL_IB_TOKEN": "x"}}}))
    with pytest.raises(config.ConfigError, match=secret.format("AWS_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY")):
        config.validate({"network": {"env": {"AWS_SECRET_ACCESS_KEY": "x"}}})


@pytest.mark.parametrize(
    ("platform", "home"),
    [
        ("spark", "keep it as spark.executorEnv.NCCL_IB_TOKEN in the cluster's spark-defaults.conf"),
        ("databricks", "keep it in a Databricks secret scope"),
        ("azureml", "keep it in the workspace's key vault"),
    ],
)
def test_a_network_secret_on_a_platform_whose_ranks_do_not_inherit_the_environment_is_not_told_to_export(
    platform, home
):
    """Exporting it where snakemake runs reaches no rank there: the HINT says where that platform's ranks read it."""
    for name, refuse in (("NCCL_IB_TOKEN", network.variables), ("AWS_SECRET_ACCESS_KEY", lambda cfg: cfg)):
        with pytest.raises(config.ConfigError) as refused:
            refuse(config.validate({"platform": platform, "network": {"env": {name: "x"}}}))
        said = str(refused.value)
        assert f"HINT: remove it from the config and {home.replace('NCCL_IB_TOKEN', name)}" in said, said
        assert "export" not in said and f"on {platform} the ranks do not inherit" in said, said


def test_infiniband_partition_keys_are_settings_not_secrets():
    cfg = config.validate({"network": {"env": {"NCCL_IB_PKEY": "0x8001", "UCX_IB_PKEY": "0x8001"}}})
    assert network.variables(cfg) == {"NCCL_IB_PKEY": "0x8001", "UCX_IB_PKEY": "0x8001"}


def test_forwarded_keeps_network_variables_only_and_says_what_it_drops(capsys):
    env = {"NCCL_DEBUG": "WARN", "FI_PROVIDER": "efa", "OMPI_MCA_btl": "self,tcp", "PATH": "/bin", "UCX_AUTH_KEY": "s"}
    env["NCCL_IB_PKEY"] = "0x8001"
    assert network.forwarded(env) == {
        "FI_PROVIDER": "efa",
        "NCCL_DEBUG": "WARN",
        "NCCL_IB_PKEY": "0x8001",
        "OMPI_MCA_btl": "self,tcp",
    }
    (line,) = capsys.readouterr().err.splitlines()
    assert "not forwarding UCX_AUTH_KEY to the ranks: the names look like credentials" in line


def test_mpirun_exports_every_network_variable_with_x(tmp_path):
    run_yaml, manifest, run_dir = prepare(tmp_path, {"launch": {"devices": 2, "launcher": "mpirun"}})
    args = launching_module.parse_args(["--config", str(run_yaml), "--run-dir", str(run_dir), "--data", str(manifest)])
    env = {"PATH": "/usr/bin", "NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "lo"}
    launcher, argv, child_env = launching_module.build(args, env)
    exported = {argv[i + 1] for i, a in enumerate(argv) if a == "-x"}
    assert launcher.name == "mpirun" and {"NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"} <= exported
    assert child_env["NCCL_SOCKET_IFNAME"] == "ib0"


@pytest.mark.e2e
@pytest.mark.parametrize("launcher", ["direct", "torchrun", "mpirun"])
def test_every_rank_sees_the_network_variables_and_provenance_records_them(tmp_path, launcher):
    (tmp_path / "probe.py").write_text(textwrap.dedent(PROBE))
    overrides = {
        "launch": {"devices": 2, "launcher": launcher},
        "model": {"target": "probe:EnvProbe"},
        "trainer": {"max_epochs": 1},
    }
    run_yaml, manifest, run_dir = prepare(tmp_path, overrides)
    network_env = {"NCCL_DEBUG": "INFO", "GLOO_SOCKET_IFNAME": "lo", "NCCL_IB_PKEY": "0x8001"}
    settings = config.validate({"network": {"env": network_env}})
    done = launch(run_yaml, manifest, run_dir, cwd=tmp_path, UCX_TLS="tcp", **jobenv.settings(settings))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    wanted = {**network_env, "UCX_TLS": "tcp"}
    for rank in (0, 1):
        seen = json.loads((run_dir / f"env-rank{rank}.json").read_text())
        assert wanted.items() <= seen.items(), f"rank {rank} saw {seen}"
    record = json.loads((run_dir / "provenance.json").read_text())
    assert record["launch"]["launcher"] == launcher
    assert wanted.items() <= record["launch"]["variables"].items()
    assert record["user_code"][0]["target"] == "probe:EnvProbe"
    if launcher == "mpirun":
        assert "-x NCCL_DEBUG" in record["launch"]["command"]
        assert "-x NCCL_IB_PKEY" in record["launch"]["command"]


@pytest.mark.e2e
def test_a_profile_sets_network_variables_for_every_rank(workflow, tiny_config):
    (workflow.directory / "probe.py").write_text(textwrap.dedent(PROBE))
    profile = workflow.directory / "profile"
    shutil.copytree(REPO / "profiles" / "local", profile)
    settings = yaml.safe_load((profile / "config.yaml").read_text())
    settings.setdefault("config", []).append("network={env: {NCCL_DEBUG: INFO, GLOO_SOCKET_IFNAME: lo}}")
    (profile / "config.yaml").write_text(yaml.safe_dump(settings))
    workflow.profile = profile
    tiny_config["model"] = {"target": "probe:EnvProbe"}
    tiny_config["launch"]["devices"] = 2
    tiny_config["trainer"]["max_epochs"] = 1
    workflow.write_config(tiny_config)
    workflow.run("results/runs/base/provenance.json")  # the ranks' environment; no report needed
    run_dir = workflow.directory / "results" / "runs" / "base"
    for rank in (0, 1):
        seen = json.loads((run_dir / f"env-rank{rank}.json").read_text())
        assert {"NCCL_DEBUG": "INFO", "GLOO_SOCKET_IFNAME": "lo"}.items() <= seen.items(), seen
