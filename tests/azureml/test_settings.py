"""The azureml: config section as the submitter reads it."""

import json

import pytest

from snakeddp.azureml.settings import AzureMLError, Settings
from snakeddp.config import ConfigError
from snakeddp.run.variables import PLATFORM_SECTION as AZUREML_CONFIG


def test_defaults_need_a_compute_and_a_workspace_only_to_submit():
    settings = Settings.from_section({})
    assert (settings.sdk, settings.distribution, settings.submit) == ("v2", "pytorch", True)
    with pytest.raises(AzureMLError, match="azureml.compute is not set.* --resource-group <group> --workspace-name"):
        settings.require_compute()
    with pytest.raises(AzureMLError, match="subscription_id, azureml.workspace.resource_group, azureml.workspace"):
        settings.require_workspace()


def test_workspace_config_file_is_read_and_explicit_keys_win(tmp_path):
    ids = {"subscription_id": "sub", "resource_group": "rg", "workspace_name": "ws"}
    (tmp_path / "config.json").write_text(json.dumps(ids))
    settings = Settings.from_section({"workspace": {"config_file": "config.json", "workspace_name": "other"}}, tmp_path)
    assert settings.require_workspace().as_dict() == {**ids, "workspace_name": "other"}


@pytest.mark.parametrize(
    ("text", "message"),
    [("{not json", "is not valid JSON"), ("[1, 2]", "must hold a JSON object")],
)
def test_bad_workspace_config_file_names_the_key(tmp_path, text, message):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(AzureMLError, match=f"azureml.workspace.config_file: .*{message}"):
        Settings.from_section({"workspace": {"config_file": "config.json"}}, tmp_path)


def test_section_is_validated_by_the_schema():
    with pytest.raises(ConfigError, match="azureml.distribution: 'horovod' is not one of"):
        Settings.from_section({"distribution": "horovod"})
    with pytest.raises(ConfigError, match="azureml.sdkk: unknown key"):
        Settings.from_section({"sdkk": "v2"})


def test_settings_travel_in_the_environment():
    settings = Settings.from_environment({AZUREML_CONFIG: json.dumps({"sdk": "v1", "compute": "cpu-cluster"})})
    assert (settings.sdk, settings.require_compute()) == ("v1", "cpu-cluster")
    with pytest.raises(AzureMLError, match=f"{AZUREML_CONFIG} is not set"):
        Settings.from_environment({})
    with pytest.raises(AzureMLError, match="is not valid JSON"):
        Settings.from_environment({AZUREML_CONFIG: "{"})
