"""Secret detection matches whole words of a name, and masks credentials inside values."""

import pytest

from snakeddp.config.network import is_network_variable
from snakeddp.util.redact import is_secret_name, looks_like_credential, recorded_environment, redact_text, scrub

SECRETS = [
    "AZURE_CLIENT_SECRET",
    "WANDB_API_KEY",
    "HF_TOKEN",
    "DB_PASSWORD",
    "DB_PWD",
    "AZUREML_RUN_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_SAS_TOKEN",
    "UCX_AUTH_KEY",
    "apiKey",
    "api-key",
    "SLURM_JWT",
    "GITHUB_BEARER",
]
SETTINGS = ["NCCL_IB_PKEY", "UCX_IB_PKEY", "TOKENIZERS_PARALLELISM", "PWD", "OLDPWD", "NCCL_SOCKET_IFNAME", "monkey"]


@pytest.mark.parametrize("name", SECRETS)
def test_credential_names_are_secret(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", SETTINGS)
def test_names_that_only_contain_a_secret_word_are_not(name):
    assert not is_secret_name(name)


def test_recorded_environment_keeps_settings_and_drops_credentials():
    env = {"NCCL_IB_PKEY": "0x8001", "UCX_IB_PKEY": "0x8002", "NCCL_IB_TOKEN": "t0k", "AZUREML_RUN_TOKEN": "t1k"}
    assert recorded_environment(env, network=is_network_variable) == {"NCCL_IB_PKEY": "0x8001", "UCX_IB_PKEY": "0x8002"}


def test_recorded_environment_is_an_allow_list_not_a_deny_list():
    env = {
        "SLURM_JOB_ID": "42", "SLURM_PROCID": "1", "MASTER_ADDR": "n1", "SNAKEDDP_PLATFORM": "slurm",
        "SLURM_JWT": "x", "SLURM_SPOOL_DIR": "/var/spool", "SLURM_SOMETHING_NEW": "y", "AZUREML_ARM_TOKENISH": "z",
        "HOME": "/root", "NCCL_SOCKET_IFNAME": "ib0",
    }  # fmt: skip
    assert recorded_environment(env, network=is_network_variable) == {
        "MASTER_ADDR": "n1", "NCCL_SOCKET_IFNAME": "ib0", "SLURM_JOB_ID": "42", "SLURM_PROCID": "1",
        "SNAKEDDP_PLATFORM": "slurm",
    }  # fmt: skip


JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"


@pytest.mark.parametrize("value", [JWT, f"token={JWT}", "Bearer abcdef0123456789", "bearer  xyz12345678"])
def test_a_token_value_is_dropped_whatever_its_name(value):
    assert looks_like_credential(value)
    assert recorded_environment({"NCCL_BLOB": value, "SLURM_JOB_ID": value}, network=is_network_variable) == {}


@pytest.mark.parametrize("value", ["ib0", "0x8001", "/opt/topo.xml", "eyJ", "a.b.c", "INFO"])
def test_ordinary_settings_are_not_taken_for_tokens(value):
    assert not looks_like_credential(value)


def test_sas_signatures_and_url_credentials_are_masked():
    sas = "https://acct.blob.core.windows.net/c/f?sv=2024&sig=abc%2Bdef&se=2026"
    assert redact_text(sas) == "https://acct.blob.core.windows.net/c/f?sv=2024&sig=***&se=2026"
    assert redact_text("https://alice:pw@proxy.invalid:3128/") == "https://***@proxy.invalid:3128/"
    assert scrub({"DB_PASSWORD": "pw", "NCCL_IB_PKEY": "0x1"}) == {"DB_PASSWORD": "***", "NCCL_IB_PKEY": "0x1"}
