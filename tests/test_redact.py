"""Secret detection matches whole words of a name, and masks credentials inside values."""

import json

import pytest

from snakeddp.util.redact import is_secret_name, recorded_environment, redact_text, scrub

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
    assert recorded_environment(env) == {"NCCL_IB_PKEY": "0x8001", "UCX_IB_PKEY": "0x8002"}


def test_sas_signatures_and_url_credentials_are_masked():
    sas = "https://acct.blob.core.windows.net/c/f?sv=2024&sig=abc%2Bdef&se=2026"
    assert redact_text(sas) == "https://acct.blob.core.windows.net/c/f?sv=2024&sig=***&se=2026"
    assert redact_text("https://alice:pw@proxy.invalid:3128/") == "https://***@proxy.invalid:3128/"
    assert scrub({"DB_PASSWORD": "pw", "NCCL_IB_PKEY": "0x1"}) == {"DB_PASSWORD": "***", "NCCL_IB_PKEY": "0x1"}


def test_package_names_in_a_listing_are_not_secrets_but_their_values_are_redacted():
    record = {
        "environment": {"packages": {"google-auth": "2.40.3", "keyring": "https://bob:pw@pypi.invalid/k"}},
        "AUTH_TOKEN": "t0k",
    }
    assert scrub(record, listings=frozenset({"packages"})) == {
        "environment": {"packages": {"google-auth": "2.40.3", "keyring": "https://***@pypi.invalid/k"}},
        "AUTH_TOKEN": "***",
    }
    assert scrub(record)["environment"]["packages"]["google-auth"] == "***", "without the listing, a name is a name"


def test_provenance_keeps_every_package_version(tmp_path):
    from snakeddp.provenance.record import write

    write(tmp_path, {"environment": {"packages": {"google-auth": "2.40.3"}, "conda_packages": {"libauth": "1=h0"}}})
    written = json.loads((tmp_path / "provenance.json").read_text())
    assert written["environment"] == {"packages": {"google-auth": "2.40.3"}, "conda_packages": {"libauth": "1=h0"}}
