"""Config validation, defaults, sweep expansion and the identities derived from config."""

import re

import pytest
import yaml

from snakeddp import config
from snakeddp.config import parts
from snakeddp.config import schema as config_schema
from tests.helpers import REPO, leaked


def test_defaults_fill_every_section():
    cfg = config.validate({})
    assert cfg["data"]["num_train_files"] == 4
    assert cfg["model"]["name"] == "mlp"
    assert cfg["trainer"]["early_stopping"]["patience"] == 3
    assert cfg["launch"]["launcher"] == "auto"
    assert cfg["sweep"] == {}


def test_validate_does_not_modify_its_input():
    raw = {"model": {"lr": 0.1}}
    config.validate(raw)
    assert raw == {"model": {"lr": 0.1}}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"model": {"lrr": 0.1}}, "model.lrr: unknown key (did you mean 'lr'?)"),
        ({"trainer": {"max_epochs": "ten"}}, "trainer.max_epochs: 'ten' is not of type 'integer'"),
        ({"data": {"num_train_files": -4}}, "data.num_train_files: -4 is less than the minimum of 1"),
        ({"launch": {"launcher": "qsub"}}, "launch.launcher: 'qsub' is not one of"),
        ({"sweep": {"learning_rate": [0.1]}}, "'learning_rate' is not a sweepable key"),
        ({"colour": "blue"}, "colour: unknown key"),
    ],
)
def test_invalid_config_names_the_key(raw, expected):
    with pytest.raises(config.ConfigError) as error:
        config.validate(raw, source="my.yaml")
    message = str(error.value)
    assert message.startswith("my.yaml is not valid")
    assert expected in message
    assert "HINT" in message


def test_all_problems_are_reported_at_once():
    with pytest.raises(config.ConfigError) as error:
        config.validate({"model": {"lr": 0}, "data": {"num_features": 0}})
    assert "model.lr" in str(error.value)
    assert "data.num_features" in str(error.value)


def test_partition_smaller_than_world_is_rejected():
    with pytest.raises(config.ConfigError, match="num_records_per_train_file=3 is smaller than the world size 4"):
        config.validate({"data": {"num_records_per_train_file": 3}, "launch": {"devices": 2, "nodes": 2}})


def test_sweep_expands_to_readable_stable_ids():
    cfg = config.validate({"sweep": {"model.lr": [0.1, 0.001], "launch.devices": [1, 2]}})
    runs = config.expand_sweep(cfg)
    assert list(runs) == ["lr-0.1_devices-1", "lr-0.1_devices-2", "lr-0.001_devices-1", "lr-0.001_devices-2"]
    run = runs["lr-0.001_devices-2"]
    assert run["point"] == {"model.lr": 0.001, "launch.devices": 2}
    assert run["config"]["model"]["lr"] == 0.001
    assert run["config"]["launch"]["devices"] == 2
    assert set(run["config"]) == set(config.RUN_KEYS)


def test_no_sweep_is_one_base_run():
    assert list(config.expand_sweep(config.validate({}))) == ["base"]


def test_sweep_values_are_validated_per_point():
    cfg = config.validate({"sweep": {"model.lr": [0.1, -1.0]}})
    with pytest.raises(config.ConfigError, match=r"(?s)sweep point lr--1.0.*model.lr"):
        config.expand_sweep(cfg)


def test_sweep_of_unknown_nested_key_is_rejected():
    cfg = config.validate({"sweep": {"model.lrr": [0.1]}})
    with pytest.raises(config.ConfigError, match="model.lrr: unknown key"):
        config.expand_sweep(cfg)


def test_ambiguous_leaf_names_use_full_keys():
    point = {"trainer.early_stopping.patience": 2, "data.seed": 3, "seed": 4}
    assert config.run_id(point) == "data.seed-3_patience-2_seed-4"


def test_dataset_id_ignores_partition_count_but_not_content():
    data = config.validate({})["data"]
    more = {**data, "num_train_files": 9}
    wider = {**data, "num_features": 64}
    assert config.dataset_id(more) == config.dataset_id(data)
    assert config.dataset_id(wider) != config.dataset_id(data)
    assert config.dataset_id(data).startswith("synthetic-")


def test_load_reports_missing_and_broken_files(tmp_path):
    with pytest.raises(config.ConfigError, match="no such config file"):
        config.load(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: [unclosed\n")
    with pytest.raises(config.ConfigError, match="not valid YAML"):
        config.load(broken)


def test_schema_is_parsed_once_and_handed_out_as_a_private_copy():
    first = config.load_schema()
    first["properties"]["seed"]["default"] = -1
    assert config.load_schema()["properties"]["seed"]["default"] == 42
    assert config.validate({})["seed"] == 42
    assert config_schema._parsed_schema.cache_info().misses == 1


def monitor(run: dict) -> dict:
    """trainer.monitor of a run config, read as the ranks read it (parts.Trainer)."""
    return parts.thaw(parts.Trainer.of(run["trainer"]).monitor)


def test_the_monitored_metric_is_config_and_at_its_default_leaves_run_ids_and_identities_as_they_were():
    default = config.run_config(config.validate({}))
    assert "monitor" not in default["trainer"], "runs finished before trainer.monitor existed stay up to date"
    assert monitor(default) == {"metric": "val_loss", "mode": "min"}
    spelled_out = config.validate({"trainer": {"monitor": {"metric": "val_loss", "mode": "min"}}})
    assert config.run_identity(config.run_config(spelled_out)) == config.run_identity(default)
    chosen = config.run_config(config.validate({"trainer": {"monitor": {"metric": "val_acc", "mode": "max"}}}))
    assert monitor(chosen) == {"metric": "val_acc", "mode": "max"}
    assert config.run_identity(chosen) != config.run_identity(default), "it decides the best checkpoint"
    runs = config.expand_sweep(config.validate({"sweep": {"trainer.monitor.mode": ["min", "max"]}}))
    assert [monitor(run["config"])["mode"] for run in runs.values()] == ["min", "max"]


@pytest.mark.parametrize(
    ("raw", "key", "needs"),
    [
        ({"model": {"kwargs": {"width": 8}}}, "model.kwargs", "model.target"),
        ({"data": {"module_kwargs": {"root": "/data"}}}, "data.module_kwargs", "data.module"),
        ({"data": {"table": {"path": "t.csv"}}}, "data.table", "data.source: table"),
        ({"sweep": {"model.kwargs.width": [8, 16]}}, "model.kwargs", "model.target"),
        (
            {"data": {"source": "table", "table": {"path": "t.csv", "label": "y"}, "label_noise": 0.2}},
            "data.label_noise",
            "data.source: synthetic",
        ),
        (
            {"data": {"source": "module", "module": "a.b:C"}, "sweep": {"data.num_features": [8, 16]}},
            "data.num_features",
            "data.source: synthetic",
        ),
    ],
)
def test_a_key_that_only_applies_with_another_is_refused_naming_both(raw, key, needs):
    with pytest.raises(config.ConfigError) as caught:
        config.expand_sweep(config.validate(raw))
    (line,) = str(caught.value).splitlines()
    assert f"{key} only applies with {needs}" in line and "HINT:" in line


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"model": {"target": "a.b:C", "lr": 0.1}}, "model.lr"),
        ({"model": {"target": "a.b:C", "hidden_sizes": [8]}}, "model.hidden_sizes"),
        ({"model": {"target": "a.b:C"}, "sweep": {"model.lr": [0.1, 0.01]}}, "model.lr"),
    ],
)
def test_a_built_in_model_key_beside_model_target_is_refused_and_its_hint_works(raw, key):
    with pytest.raises(config.ConfigError) as caught:
        config.expand_sweep(config.validate(raw))
    (line,) = str(caught.value).splitlines()
    leaf = key.split(".")[-1]
    assert f"{key} configures the built-in models, and model.target is set" in line
    assert f"HINT: pass it to your model's constructor as model.kwargs.{leaf}" in line
    # As the HINT says: the value goes to the model's constructor instead.
    fixed = {"model": {"target": "a.b:C", "kwargs": {leaf: 0.1}}}
    if "sweep" in raw:
        fixed["sweep"] = {f"model.kwargs.{leaf}": raw["sweep"][key]}
    runs = config.expand_sweep(config.validate(fixed))
    assert all(run["config"]["model"]["kwargs"][leaf] is not None for run in runs.values())


def test_keys_that_apply_pass():
    config.validate({"model": {"target": "a.b:C", "kwargs": {"width": 8}}})
    config.validate({"data": {"source": "module", "module": "a.b:D", "module_kwargs": {"root": "/data"}}})


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"model": {"target": "pkg.mod:Net", "kwargs": {"hub": {"api_token": "hub-tok-2b7e"}}}},
         "model.kwargs.hub.api_token"),
        ({"data": {"source": "module", "module": "pkg.mod:Data", "module_kwargs": {"db_password": 'p"w 9c1d'}}},
         "data.module_kwargs.db_password"),
        ({"trainer": {"strategy": "deepspeed", "strategy_options": {"aws_secret_access_key": "aws-key-6f0a"}}},
         "trainer.strategy_options.aws_secret_access_key"),
        ({"model": {"target": "pkg.mod:Net"}, "sweep": {"model.kwargs.registry_token": ["reg-1-5e3c"]}},
         "model.kwargs.registry_token"),
    ],
)  # fmt: skip
def test_a_secret_in_a_runs_own_maps_is_refused_in_one_line_without_its_value(raw, key):
    with pytest.raises(config.ConfigError) as refused:
        config.expand_sweep(config.validate(raw))
    (line,) = str(refused.value).splitlines()
    assert f"{key} looks like a secret" in line and "HINT: remove it from the config, export it" in line
    assert not leaked(line, ("hub-tok-2b7e", 'p"w 9c1d', "aws-key-6f0a", "reg-1-5e3c"))


def test_a_models_settings_about_keys_and_tokens_and_storage_keys_outside_the_run_pass():
    raw = {
        "model": {"target": "pkg.mod:Net", "kwargs": {"max_tokens": 512, "pad_token": "<pad>", "key_dim": 64,
                                                      "num_key_value_heads": 8, "private": True}},
        "spark": {"conf": {"spark.hadoop.fs.s3a.secret.key": "s3a-key"}},
    }  # fmt: skip
    assert config.validate(raw)["model"]["kwargs"]["max_tokens"] == 512


def test_a_wrong_type_under_a_secret_name_is_named_without_its_value():
    with pytest.raises(config.ConfigError) as refused:
        config.validate({"databricks": {"new_cluster": {"spark_conf": {"spark.ssl.keyStorePassword": 918273}}}})
    assert "spark.ssl.keyStorePassword: *** is not of type 'string'" in str(refused.value)
    assert "918273" not in str(refused.value)


def test_a_refused_value_holding_a_urls_credentials_is_quoted_without_them():
    """A value is quoted as given (any key: report.title, a table's path), with user:password@ and a SAS
    signature masked."""
    with pytest.raises(config.ConfigError) as refused:
        config.validate(
            {"report": {"title": ["http://carol:Carol5ecretPw@host/x"]}, "data": {"seed": "az://c/t?sig=S4S"}}
        )
    said = str(refused.value)
    assert "Carol5ecretPw" not in said and "S4S" not in said, said
    assert "http://***@host/x" in said and "report.title" in said and "data.seed" in said, said


def test_a_value_an_alternative_or_a_pattern_refuses_says_what_the_key_accepts():
    with pytest.raises(config.ConfigError) as caught:
        config.validate({"launch": {"hang_timeout": 3}, "model": {"target": "mynet.model.TinyNet"}})
    lines = str(caught.value).splitlines()
    assert '  launch.hang_timeout: 3 is none of what it accepts: "auto", a number from 5 to 86400, null' in lines
    (target,) = [line for line in lines if line.startswith("  model.target:")]
    assert target == (
        "  model.target: 'mynet.model.TinyNet' is not an import path. HINT: did you mean 'mynet.model:TinyNet'? "
        "(a module under the directory snakemake runs in, dots for its folders, no .py)"
    )
    # What the line says it accepts is accepted.
    assert config.validate({"launch": {"hang_timeout": 5}, "model": {"target": "mynet.model:TinyNet"}})
    # Another pattern: the key's description says what it wants, not the regular expression.
    table = {"path": "t.csv", "label": "y", "sha256": "abc"}
    with pytest.raises(config.ConfigError, match=r"data.table.sha256: 'abc' does not match .*\(data.table.sha256: Che"):
        config.validate({"data": {"source": "table", "table": table}})


def test_one_value_given_as_a_sweep_is_refused_with_the_list_that_works():
    with pytest.raises(config.ConfigError) as caught:
        config.validate({"sweep": {"model.lr": "0.1"}})  # --config 'sweep={model.lr: 0.1}' hands over text
    (line,) = [line for line in str(caught.value).splitlines() if line.startswith("  sweep.")]
    assert line == (
        "  sweep.model.lr: 0.1 is one value, and a sweep takes a list of them. HINT: write it as a list, "
        "e.g. sweep: {model.lr: [0.1]} (--config 'sweep={model.lr: [0.1]}')"
    )
    # A secret-looking key's value is not shown, in this line as in every other.
    with pytest.raises(config.ConfigError) as hidden:
        config.validate({"sweep": {"model.kwargs.api_token": "abc123"}})
    assert "abc123" not in str(hidden.value)
    runs = config.expand_sweep(config.validate({"sweep": yaml.safe_load("{model.lr: [0.1]}")}))
    assert [run["config"]["model"]["lr"] for run in runs.values()] == [0.1]


def test_a_sweep_value_given_twice_is_named_and_giving_it_once_as_hinted_plans():
    with pytest.raises(config.ConfigError) as refused:
        config.expand_sweep(config.validate({"sweep": {"seed": [1, 2, 1]}}))
    line = str(refused.value)
    assert "two sweep points share the run id 'seed-1' (seed: 1)" in line, line
    assert line.count("HINT: give each value once in the sweep's lists (seed)") == 1
    assert list(config.expand_sweep(config.validate({"sweep": {"seed": [1, 2]}}))) == ["seed-1", "seed-2"]


def test_a_key_in_the_wrong_section_is_pointed_to_its_own_and_moved_as_hinted_validates():
    with pytest.raises(config.ConfigError) as refused:
        config.validate({"model": {"max_epochs": 3}})
    assert "model.max_epochs: unknown key (it is a key of trainer: did you mean trainer.max_epochs?)" in str(
        refused.value
    )
    assert config.validate({"trainer": {"max_epochs": 3}})["trainer"]["max_epochs"] == 3


def test_one_hint_a_refusal_and_the_file_that_documents_a_platforms_keys():
    """A line with its own HINT is the one to follow; a platform's keys are documented in its package."""
    for raw in ({"sweep": {"model.lr": 0.1}}, {"experiment": "a b"}):
        with pytest.raises(config.ConfigError) as refused:
            config.validate(raw)
        assert str(refused.value).count("HINT:") == 1, str(refused.value)
    with pytest.raises(config.ConfigError) as refused:
        config.validate({"azureml": {"comput": "x"}})
    (named,) = re.findall(r"documented in (\S+);", str(refused.value))
    assert named == "src/snakeddp/azureml/settings.yaml" and (REPO / named).is_file()
    assert "compute:" in (REPO / named).read_text()


@pytest.mark.parametrize(
    ("platform", "where"),
    [
        ("local", "export it where snakemake runs (export REGISTRY_TOKEN=...)"),
        ("slurm", "export it where snakemake runs (export REGISTRY_TOKEN=...)"),
        ("azureml", "keep it in the workspace's key vault"),
        ("databricks", "keep it in a Databricks secret scope, given to the job as {{secrets/<scope>/<key>}}"),
        ("spark", "keep it as spark.executorEnv.REGISTRY_TOKEN in the cluster's spark-defaults.conf"),
    ],
)
def test_a_secret_refused_in_the_config_is_sent_where_the_platforms_ranks_read_it(platform, where):
    """The ranks of AzureML, Databricks and Spark's executors do not inherit the shell snakemake runs in: an
    exported variable never reaches them."""
    with pytest.raises(config.ConfigError) as refused:
        config.validate({"platform": platform, "model": {"target": "m:Net", "kwargs": {"registry_token": "t0k"}}})
    line = str(refused.value)
    assert where in line and "t0k" not in line, line
    assert ("do not inherit the environment" in line) == (platform not in ("local", "slurm")), line


@pytest.mark.parametrize(
    ("key", "given", "meant"),
    [
        ("model.target", "byo/digits_model.py:DigitsNet", "byo.digits_model:DigitsNet"),
        ("model.target", "./byo/digits_model.py:DigitsNet", "byo.digits_model:DigitsNet"),
        ("model.target", "byo.digits_model.DigitsNet", "byo.digits_model:DigitsNet"),
        ("data.module", "mydata/loaders.py:Images", "mydata.loaders:Images"),
    ],
)
def test_a_class_given_as_its_files_path_or_a_class_path_names_the_import_path_it_means(key, given, meant):
    """The schema's regular expression was all the line said ("does not match '^[A-Za-z_]...'"), under a
    HINT to read config/schema.yaml; the import path the user meant is one that validates."""
    section, name = key.split(".")
    with pytest.raises(config.ConfigError) as refused:
        config.validate({section: {name: given}})
    said = str(refused.value)
    assert f"{key}: {given!r} is not an import path. HINT: did you mean '{meant}'?" in said, said
    assert said.count("HINT:") == 1 and "[A-Za-z_]" not in said, said
    assert config.validate({section: {name: meant}})[section][name] == meant


@pytest.mark.parametrize(
    ("section", "given", "line"),
    [
        ({"trainer": {"max_epochs": "3"}}, {"trainer": {"max_epochs": 3}}, "write it without quotes: max_epochs: 3"),
        ({"model": {"lr": "0.01"}}, {"model": {"lr": 0.01}}, "write it without quotes: lr: 0.01"),
        (
            {"data": {"source": "table", "table": {"path": "t.csv", "label": "y", "features": "x1"}}},
            {"data": {"source": "table", "table": {"path": "t.csv", "label": "y", "features": ["x1"]}}},
            "write it as a list: features: [x1]",
        ),
    ],
)
def test_a_value_of_the_wrong_type_with_a_plain_fix_says_it_and_the_fix_validates(section, given, line):
    """'3' (quoted in YAML) or one feature without brackets: the line said only "is not of type 'integer'",
    under a HINT to read config/schema.yaml."""
    with pytest.raises(config.ConfigError) as refused:
        config.validate(section)
    said = str(refused.value)
    assert f"HINT: {line}" in said and said.count("HINT:") == 1 and "schema.yaml" not in said, said
    assert config.validate(given)


def test_a_key_beside_model_target_is_pointed_to_model_kwargs_not_to_a_built_in_models_key():
    """'model.hidden: unknown key (did you mean 'hidden_sizes'?)': hidden_sizes, a built-in model's key, is refused
    beside model.target; the class's own argument goes in model.kwargs, in the config and in a sweep alike."""
    model = {"target": "byo.digits_model:DigitsNet"}
    for cfg in ({"model": {**model, "hidden": 32}}, {"model": model, "sweep": {"model.hidden": [8, 16]}}):
        with pytest.raises(config.ConfigError) as refused:
            config.expand_sweep(config.validate(cfg))
        said = str(refused.value)
        assert "model.hidden: unknown key (model.target's own arguments go in model.kwargs: did you mean " in said
        assert "model.kwargs.hidden?" in said and "hidden_sizes" not in said, said
    fixed = {"model": {**model, "kwargs": {"hidden": 32}}, "sweep": {"model.kwargs.hidden": [8, 16]}}
    assert len(config.expand_sweep(config.validate(fixed))) == 2
    # A typo of a key that applies beside model.target is still named as that key.
    with pytest.raises(config.ConfigError, match=r"model.kwarg: unknown key \(did you mean 'kwargs'\?\)"):
        config.validate({"model": {**model, "kwarg": {"hidden": 32}}})
    # Another section's key is still named as that section's.
    with pytest.raises(config.ConfigError, match=r"model.max_epochs: unknown key \(it is a key of trainer"):
        config.validate({"model": {**model, "max_epochs": 3}})
    # Without model.target the built-ins' key is still the one meant.
    with pytest.raises(config.ConfigError, match=r"model.hidden: unknown key \(did you mean 'hidden_sizes'\?\)"):
        config.validate({"model": {"hidden": [32]}})


@pytest.mark.parametrize(
    ("given", "fixed"),
    [
        (
            {"trainer": {"monitor": {"metric": "val_acc"}}},
            {"trainer": {"monitor": {"metric": "val_acc", "mode": "max"}}},
        ),
        (
            {"search": {"method": "successive_halving", "metric": "val_acc"}, "sweep": {"model.lr": [0.1, 0.01]}},
            {
                "search": {"method": "successive_halving", "metric": "val_acc", "mode": "max"},
                "sweep": {"model.lr": [0.1, 0.01]},
            },
        ),
    ],
)
def test_a_rising_metric_monitored_without_its_mode_is_refused_and_its_mode_given_validates(given, fixed):
    """trainer.monitor: {metric: val_acc} took mode min, its default: the best checkpoint was the epoch of the lowest
    accuracy, and early stopping stopped while it rose (a search's metric: the configurations of the lowest)."""
    section = "trainer.monitor" if "trainer" in given else "search"
    with pytest.raises(config.ConfigError) as refused:
        config.validate(given)
    said = str(refused.value)
    assert f"{section}.metric is 'val_acc', which rises as the model improves" in said, said
    assert said.count("HINT:") == 1 and f"HINT: set {section}.mode: max beside it" in said, said
    assert config.validate(fixed)
    # A mode given, either one, is the user's choice; search inherits trainer.monitor's max.
    assert config.validate({"trainer": {"monitor": {"metric": "val_acc", "mode": "min"}}})
    assert config.validate({**given, "trainer": {"monitor": {"metric": "val_acc", "mode": "max"}}})


def test_a_rising_metric_named_in_a_configfile_takes_no_mode_from_the_checkouts_config():
    """config/config.yaml says {metric: val_loss, mode: min}: a --configfile's {metric: val_acc} merged over it kept
    min, and the check of the merged config saw a mode given. The layers tell which layer chose the mode."""
    from snakeddp.config import layers, monitor

    base = layers.load_layer(REPO / "config" / "config.yaml")
    assert base["trainer"]["monitor"] == {"metric": "val_loss", "mode": "min"}
    mine = {"trainer": {"monitor": {"metric": "val_acc"}}}
    assert monitor.rising_without_mode([base, mine]) == ("trainer.monitor", "val_acc")
    assert monitor.rising_without_mode([base, mine, {"trainer": {"monitor": {"mode": "max"}}}]) is None, "--config"
    assert monitor.rising_without_mode([base, {"trainer": {"monitor": {"metric": "val_acc", "mode": "max"}}}]) is None
    assert monitor.rising_without_mode([base, {"trainer": {"monitor": {"metric": "val_score"}}}]) is None, "not by name"
    for rising in ("val_f1", "val_auroc", "val_recall"):
        assert monitor.rising_without_mode([base, {"trainer": {"monitor": {"metric": rising}}}]), rising
    searched = {"search": {"method": "successive_halving", "metric": "val_acc"}}
    assert monitor.rising_without_mode([base, searched]) == ("search", "val_acc")
    maxed = {"trainer": {"monitor": {"metric": "val_acc", "mode": "max"}}}
    assert monitor.rising_without_mode([base, maxed, searched]) is None, "search inherits trainer.monitor's max"
