"""Secret detection matches whole words of a name, and masks credentials inside values, in records and in a
config file's own text."""

import json

import pytest
import yaml

from snakeddp.config.network import is_network_variable
from snakeddp.provenance.record import cluster_variables
from snakeddp.util.redact import (
    environment_secrets,
    is_secret_name,
    looks_like_credential,
    recorded_environment,
    redact_text,
    scrub,
    secret_keys,
)
from snakeddp.util.yamltext import redact_yaml

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
    # Spark and Hadoop settings of storage credentials, as spark.conf and Databricks' spark_conf hold them.
    "spark.hadoop.fs.s3a.secret.key",
    "spark.hadoop.fs.s3a.access.key",
    "spark.hadoop.fs.s3a.session.token",
    "spark.hadoop.fs.azure.account.key.lakeacct.dfs.core.windows.net",
    "fs.azure.account.key.size.dfs.core.windows.net",  # an account named like a describing word
    "spark.hadoop.fs.azure.sas.lake.lakeacct.blob.core.windows.net",
    "spark.hadoop.fs.azure.account.oauth2.client.secret",
    "spark.hadoop.fs.gs.auth.service.account.private.key",
    "spark.authenticate.secret",
    "spark.ssl.keyPassword",
    "spark.ssl.keyStorePassword",
    "registry_token",
    "hub.api_key",
    "key",
]
SETTINGS = ["NCCL_IB_PKEY", "UCX_IB_PKEY", "TOKENIZERS_PARALLELISM", "PWD", "OLDPWD", "NCCL_SOCKET_IFNAME", "monkey",
            # Where a secret is kept, or which one, is not the secret.
            "spark.authenticate.secret.file", "AWS_ACCESS_KEY_ID", "secret_scope", "spark.ssl.keyStore",
            "spark.hadoop.fs.azure.account.oauth.provider.type", "fs.azure.account.auth.type",
            # A model's settings (transformers' config names): sizes and counts of keys and tokens.
            "max_tokens", "max_new_tokens", "num_tokens", "pad_token_id", "pad_token", "special_tokens", "key_dim",
            "num_key_value_heads", "key_value_proj_dim", "n_keys", "key_padding_mask", "token_type_ids",
            # A field's key is no credential: Databricks' task_key, a table's, a batch dict's.
            "task_key", "job_cluster_key", "partition_key", "sort_key", "image_key", "label_key"]  # fmt: skip


@pytest.mark.parametrize("name", SECRETS)
def test_credential_names_are_secret(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", SETTINGS)
def test_names_that_only_contain_a_secret_word_are_not(name):
    assert not is_secret_name(name)


def test_recorded_environment_keeps_settings_and_drops_credentials():
    env = {"NCCL_IB_PKEY": "0x8001", "UCX_IB_PKEY": "0x8002", "NCCL_IB_TOKEN": "t0k", "AZUREML_RUN_TOKEN": "t1k"}
    assert recorded_environment(env, also=is_network_variable) == {"NCCL_IB_PKEY": "0x8001", "UCX_IB_PKEY": "0x8002"}


def test_recorded_environment_is_an_allow_list_not_a_deny_list():
    env = {
        "SLURM_JOB_ID": "42", "SLURM_PROCID": "1", "MASTER_ADDR": "n1", "SNAKEDDP_PLATFORM": "slurm",
        "SLURM_JWT": "x", "SLURM_SPOOL_DIR": "/var/spool", "SLURM_SOMETHING_NEW": "y", "AZUREML_ARM_TOKENISH": "z",
        "HOME": "/root", "NCCL_SOCKET_IFNAME": "ib0",
    }  # fmt: skip
    # The platforms' names come from their job sides (snakeddp.platforms.recorded_names), as provenance asks.
    assert cluster_variables(env) == {
        "MASTER_ADDR": "n1", "NCCL_SOCKET_IFNAME": "ib0", "SLURM_JOB_ID": "42", "SLURM_PROCID": "1",
        "SNAKEDDP_PLATFORM": "slurm",
    }  # fmt: skip


JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"


@pytest.mark.parametrize("value", [JWT, f"token={JWT}", "Bearer abcdef0123456789", "bearer  xyz12345678"])
def test_a_token_value_is_dropped_whatever_its_name(value):
    assert looks_like_credential(value)
    assert cluster_variables({"NCCL_BLOB": value, "SLURM_JOB_ID": value}) == {}


@pytest.mark.parametrize("value", ["ib0", "0x8001", "/opt/topo.xml", "eyJ", "a.b.c", "INFO"])
def test_ordinary_settings_are_not_taken_for_tokens(value):
    assert not looks_like_credential(value)


def test_sas_signatures_and_url_credentials_are_masked():
    sas = "https://acct.blob.core.windows.net/c/f?sv=2024&sig=abc%2Bdef&se=2026"
    assert redact_text(sas) == "https://acct.blob.core.windows.net/c/f?sv=2024&sig=***&se=2026"
    assert redact_text("https://alice:pw@proxy.invalid:3128/") == "https://***@proxy.invalid:3128/"
    assert scrub({"DB_PASSWORD": "pw", "NCCL_IB_PKEY": "0x1"}) == {"DB_PASSWORD": "***", "NCCL_IB_PKEY": "0x1"}


# What users keep in the config's free-form maps, at several depths.
CONFIG = {
    "spark": {"conf": {"spark.hadoop.fs.s3a.secret.key": "s3a-key", "spark.sql.shuffle.partitions": 8,
                       "spark.authenticate.secret.file": "/etc/spark/secret"}},
    "databricks": {"new_cluster": {"spark_version": "16.4.x-cpu-ml-scala2.12", "spark_conf": {
        "spark.hadoop.fs.azure.account.key.lakeacct.dfs.core.windows.net": "account-key",
        "spark.password": "{{secrets/ml/password}}"}}},
    "model": {"kwargs": {"hub": {"api_token": "hub-token", "private": True}, "max_tokens": 512}},
    "tracking": {"mlflow": {"tracking_uri": "https://alice:pw@mlflow.invalid/"}},
}  # fmt: skip
MASKED = {
    "spark": {"conf": {"spark.hadoop.fs.s3a.secret.key": "***", "spark.sql.shuffle.partitions": 8,
                       "spark.authenticate.secret.file": "/etc/spark/secret"}},
    "databricks": {"new_cluster": {"spark_version": "16.4.x-cpu-ml-scala2.12", "spark_conf": {
        "spark.hadoop.fs.azure.account.key.lakeacct.dfs.core.windows.net": "***",
        "spark.password": "{{secrets/ml/password}}"}}},
    "model": {"kwargs": {"hub": {"api_token": "***", "private": True}, "max_tokens": 512}},
    "tracking": {"mlflow": {"tracking_uri": "https://***@mlflow.invalid/"}},
}  # fmt: skip


def test_scrub_masks_every_free_form_map_at_any_depth_keeping_keys_flags_and_secret_references():
    assert scrub(CONFIG) == MASKED
    assert secret_keys(CONFIG["model"]["kwargs"], "model.kwargs") == ["model.kwargs.hub.api_token"]
    assert secret_keys(CONFIG["spark"]["conf"], "spark.conf") == ["spark.conf.spark.hadoop.fs.s3a.secret.key"]


def test_a_config_section_exported_as_json_is_scrubbed_inside_where_it_is_recorded():
    exported = {"SNAKEDDP_PLATFORM_SECTION": json.dumps(CONFIG["spark"]), "SNAKEDDP_PLATFORM": "spark"}
    recorded = recorded_environment(exported, also=is_network_variable)
    assert json.loads(recorded["SNAKEDDP_PLATFORM_SECTION"]) == MASKED["spark"]
    assert recorded["SNAKEDDP_PLATFORM"] == "spark"
    nested = scrub(
        {"parameters": ["--variables", json.dumps({"SNAKEDDP_PLATFORM_SECTION": json.dumps(CONFIG["spark"])})]}
    )
    assert "s3a-key" not in json.dumps(nested) and "spark.hadoop.fs.s3a.secret.key" in json.dumps(nested)
    assert scrub('{"not": "a secret"}') == '{"not": "a secret"}', "unchanged text stays as written"


TEXT = """\
# Where the runs go. The storage keys below are the team's.
spark:
  conf:
    spark.hadoop.fs.s3a.secret.key: "s3a-key"   # rotated monthly
    spark.sql.shuffle.partitions: 8
    spark.authenticate.secret.file: /etc/spark/secret
databricks:
  new_cluster: {spark_version: 16.4.x-cpu-ml-scala2.12, spark_conf: {
      spark.hadoop.fs.azure.account.key.lakeacct.dfs.core.windows.net: account-key,
      spark.password: "{{secrets/ml/password}}"}}
model:
  kwargs:
    hub:
      api_token: |
        hub-token
      private: true
    max_tokens: 512
tracking: {mlflow: {tracking_uri: "https://alice:pw@mlflow.invalid/"}}
"""


def test_a_config_files_text_is_masked_where_each_secret_is_written_and_keeps_its_comments():
    masked = redact_yaml(TEXT)
    assert yaml.safe_load(masked) == MASKED
    assert "# Where the runs go." in masked and "# rotated monthly" in masked
    assert "spark.hadoop.fs.s3a.secret.key: '***'   # rotated monthly" in masked
    assert masked.count("'***'") == 3
    for value in ("s3a-key", "account-key", "hub-token", "alice:pw"):
        assert value not in masked


def test_text_that_cannot_be_masked_in_place_is_written_anew_with_nothing_secret():
    # The secret is held by an anchor under a harmless name and used under a secret one.
    text = "defaults: &db {password: anchored-pw}\nservice:\n  <<: *db\n  token: &t tok-1\nagain: *t\n"
    masked = redact_yaml(text)
    assert yaml.safe_load(masked) == scrub(yaml.safe_load(text))
    assert "anchored-pw" not in masked


def test_a_number_that_equals_a_short_secret_is_data_and_a_long_one_is_masked():
    # CI once masked a run's best epoch and a partition's offset (15) because some credential's value was "15".
    record = {"training": {"best_epoch": 15, "offsets": [0, 15]}, "api_key": "15", "pin": 12345678}
    assert scrub(record) == {"training": {"best_epoch": 15, "offsets": [0, 15]}, "api_key": "***", "pin": 12345678}
    assert scrub({"port": 12345678}, secrets={"12345678"}) == {"port": "***"}


def test_a_short_value_of_a_secret_named_variable_is_a_flag_and_masks_nothing_else():
    env = {"HF_HUB_DISABLE_TOKEN": "1", "CI_KEY_ID": "15", "DB_PASSWORD": "hunter2-long"}
    assert environment_secrets(env) == {"hunter2-long"}
    record = {"epochs": "15", "url": "x://u:hunter2-long@h", "note": "hunter2-long"}
    assert scrub(record, environment_secrets(env)) == {"epochs": "15", "url": "x://***@h", "note": "***"}
