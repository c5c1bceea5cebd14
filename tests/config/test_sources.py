"""Dataset identity per source, the cross-key rules of data:, and table checksums in run configs."""

from __future__ import annotations

import copy

import pandas as pd
import pytest

from snakeddp import config
from snakeddp.config import sources
from snakeddp.data import plan
from snakeddp.data.identity import fingerprint
from snakeddp.util.hashing import sha256_json


def data_cfg(**overrides):
    return config.validate({"data": overrides})["data"]


def table_cfg(path="t.csv", **overrides):
    return data_cfg(source="table", table={"path": str(path), "features": ["a"], "label": "y"}, **overrides)


def test_synthetic_ids_are_what_they_were_before_tables_existed():
    data = data_cfg()
    later = ("num_train_files", "table", "module", "module_kwargs", "image", "augment")
    old_identity = {k: v for k, v in data.items() if k not in later}
    assert config.dataset_id(data) == f"synthetic-{sha256_json(old_identity)[:10]}"
    assert config.dataset_id({**data, "table": {"path": "x.csv"}}) == config.dataset_id(data), "table keys do not apply"
    with pytest.raises(config.ConfigError, match=r"data.table only applies with data.source: table.*HINT"):
        data_cfg(table={"path": "x.csv"})


def test_table_identity_is_the_table_its_checksum_and_the_partition_count():
    data = table_cfg()
    assert set(sources.identity(data)) == {"name", "source", "seed", "num_train_files", "num_classes", "table"}
    changed = copy.deepcopy(data)
    changed["table"]["sha256"] = "0" * 64
    assert config.dataset_id(changed) != config.dataset_id(data), "a changed table is a new dataset"
    assert config.dataset_id(table_cfg(num_train_files=5)) != config.dataset_id(data), "rows are dealt across P"
    assert config.dataset_id({**data, "num_features": 99}) == config.dataset_id(data), "synthetic keys do not apply"
    with pytest.raises(config.ConfigError, match=r"data.num_features only applies with data.source: synthetic.*HINT"):
        table_cfg(num_features=99)


def test_task_of_a_table_comes_from_its_columns():
    params = sources.identity(table_cfg(num_classes=4))
    assert sources.task(params) == {"num_features": 1, "num_classes": 4, "kind": "multiclass"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"source": "table"}, "data.source=table needs data.table.path, data.table.label. HINT"),
        (
            {"source": "table", "table": {"path": "t.csv", "features": ["a"], "exclude": ["b"], "label": "y"}},
            "data.table.exclude narrows the columns taken when data.table.features is empty",
        ),
        ({"source": "table", "table": {"path": "t.csv", "features": ["a", "y"], "label": "y"}}, "must not contain"),
        (
            {"source": "table", "table": {"path": "t.csv", "label": "y", "categories": ["y"]}},
            r"data.table.categories lists the label 'y'.*HINT: remove it from data.table.categories",
        ),
        ({"source": "module"}, "data.source=module needs data.module"),
    ],
)
def test_cross_key_rules_name_the_keys(data, message):
    with pytest.raises(config.ConfigError, match=message):
        config.validate({"data": data})


def test_resolve_tables_fills_and_checks_the_checksum(tmp_path):
    path = tmp_path / "t.csv"
    pd.DataFrame({"a": [1.0, 2.0], "y": [0, 1]}).to_csv(path, index=False)
    runs = config.expand_sweep(config.validate({"data": table_cfg(path)}))
    plan.resolve_tables(runs, cache=tmp_path / "cache.json")
    digest = runs["base"]["config"]["data"]["table"]["sha256"]
    assert len(digest) == 64
    assert plan.input_files(runs["base"]["config"]["data"]) == [str(path)]
    pd.DataFrame({"a": [1.0, 3.0], "y": [0, 1]}).to_csv(path, index=False)
    with pytest.raises(config.ConfigError, match="data.table.sha256 pins"):
        plan.resolve_tables(runs, cache=tmp_path / "cache.json")


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_feature_or_label_the_table_lacks_is_refused_when_the_workflow_plans(tmp_path, kind):
    """Found by ingestion before: the typo cost a failed job and a run started beside it (and `snakemake -n` said
    nothing). Now one line before any job, in ingestion's words; the columns fixed as it says, the plan goes on."""
    path = tmp_path / f"t.{kind}"
    frame = pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0], "y": [0, 1]})
    frame.to_csv(path, index=False) if kind == "csv" else frame.to_parquet(path)
    for table, missing in (({"features": ["a", "nope"]}, "'nope'"), ({"features": ["a"], "label": "zzz"}, "'zzz'")):
        data = table_cfg(path)
        data["table"].update(table)
        runs = config.expand_sweep(config.validate({"data": data}))
        with pytest.raises(config.ConfigError) as refused:
            plan.resolve_tables(runs, cache=tmp_path / "cache.json")
        said = str(refused.value)
        assert said.startswith(f"run base: {path}: no column {missing} (the file has: a, b, y)"), said
        assert "HINT: fix data.table.features / data.table.label" in said and "\n" not in said
    data = table_cfg(path)
    data["table"]["features"] = ["a", "b"]
    runs = config.expand_sweep(config.validate({"data": data}))
    plan.resolve_tables(runs, cache=tmp_path / "cache.json")
    assert len(runs["base"]["config"]["data"]["table"]["sha256"]) == 64


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_label_typo_with_features_left_out_is_refused_when_the_workflow_plans(tmp_path, kind):
    """With every other column as features, the plan took the real label ('digit') for a feature and passed
    the typo ('digits') to ingestion, a job, to refuse; a wide table's line then named all its columns."""
    path = tmp_path / f"t.{kind}"
    frame = pd.DataFrame({**{f"px_{i}": [1.0, 2.0] for i in range(30)}, "digit": [0, 1]})
    frame.to_csv(path, index=False) if kind == "csv" else frame.to_parquet(path)
    data = data_cfg(source="table", table={"path": str(path), "label": "digits"})
    runs = config.expand_sweep(config.validate({"data": data}))
    with pytest.raises(config.ConfigError) as refused:
        plan.resolve_tables(runs, cache=tmp_path / "cache.json")
    said = str(refused.value)
    assert said.startswith(f"run base: data.table.path={str(path)!r}: no column 'digits' (the file has: px_0,"), said
    assert "... (31 columns)" in said and "px_29" not in said and "\n" not in said
    assert "HINT: did you mean 'digit'? fix data.table.features / data.table.label" in said
    data["table"]["label"] = "digit"
    runs = config.expand_sweep(config.validate({"data": data}))
    plan.resolve_tables(runs, cache=tmp_path / "cache.json")
    assert runs["base"]["config"]["data"]["table"]["features"] == sorted(f"px_{i}" for i in range(30))


@pytest.mark.parametrize("chooser", [{"exclude": ["name"]}, {"feature_pattern": "px_*"}])
def test_features_resolved_from_exclude_or_a_pattern_give_a_run_config_that_validates(tmp_path, chooser):
    """run.yaml listed the resolved features beside exclude (or feature_pattern), and every rank's check of it
    refused the pair: a table narrowed as docs/data.md says never trained."""
    path = tmp_path / "t.parquet"
    pd.DataFrame({"px_b": [1.0, 2.0], "px_a": [3.0, 4.0], "name": ["u", "v"], "y": [0, 1]}).to_parquet(path)
    data = data_cfg(source="table", table={"path": str(path), "label": "y", **chooser})
    runs = config.expand_sweep(config.validate({"data": data}))
    plan.resolve_tables(runs, cache=tmp_path / "cache.json")
    resolved = runs["base"]["config"]
    assert resolved["data"]["table"]["features"] == ["px_a", "px_b"]
    assert config.validate(resolved, "run.yaml")["data"]["table"]["features"] == ["px_a", "px_b"]
    assert config.dataset_id(resolved["data"]) == config.dataset_id(
        {
            **data,
            "table": {**data["table"], "features": ["px_a", "px_b"], "sha256": resolved["data"]["table"]["sha256"]},
        }
    ), "the same dataset as the features listed by hand"


def test_resolve_tables_explains_a_missing_table(tmp_path):
    runs = config.expand_sweep(config.validate({"data": table_cfg(tmp_path / "gone.csv")}))
    with pytest.raises(config.ConfigError, match="run base: data.table.path=.*gone.csv.*no such file"):
        plan.resolve_tables(runs, cache=tmp_path / "cache.json")


def test_a_table_path_under_tilde_says_to_write_it_in_full_and_the_full_path_resolves(tmp_path, monkeypatch):
    """'~/t.csv' read as a folder named '~' in the working directory, under a HINT about relative paths."""
    monkeypatch.setenv("HOME", str(tmp_path))
    pd.DataFrame({"a": [1.0, 2.0], "y": [0, 1]}).to_csv(tmp_path / "t.csv", index=False)
    runs = config.expand_sweep(config.validate({"data": table_cfg("~/t.csv")}))
    with pytest.raises(config.ConfigError) as refused:
        plan.resolve_tables(runs, cache=tmp_path / "cache.json")
    said = str(refused.value)
    assert said.endswith(
        f"HINT: '~' is not expanded in a config: write the path in full ({str(tmp_path / 't.csv')!r})."
    ), said
    runs = config.expand_sweep(config.validate({"data": table_cfg(tmp_path / "t.csv")}))
    plan.resolve_tables(runs, cache=tmp_path / "cache.json")
    assert len(runs["base"]["config"]["data"]["table"]["sha256"]) == 64


def test_ids_and_partition_bytes_of_existing_configs_never_change(tmp_path):
    """Pinned from the code before the identity had one definition (febc63a): a change here
    regenerates every user's data and retrains every run."""
    from snakeddp.data.generate import write_synthetic
    from snakeddp.util.hashing import sha256_file

    assert config.dataset_id(data_cfg()) == "synthetic-5bf3b09875"
    tiny = data_cfg(num_train_files=3, num_records_per_train_file=300, num_val_records=200, num_features=8)
    assert config.dataset_id(tiny) == "synthetic-978ec63783"
    write_synthetic(sources.identity(tiny), "train", 1, tmp_path / "p.safetensors", tmp_path / "p.json")
    assert sha256_file(tmp_path / "p.safetensors") == "401dcc91e913cd31ade06695e8afcfb57418d48ef6080cf6a09335e07bc802b2"


@pytest.mark.parametrize("fix", ["restore", "update", "clear"])
def test_a_changed_pinned_table_passes_after_each_fix_the_hint_names(tmp_path, fix):
    path = tmp_path / "t.csv"
    pd.DataFrame({"a": [1.0, 2.0], "y": [0, 1]}).to_csv(path, index=False)
    original = path.read_bytes()
    data = table_cfg(path)
    data["table"]["sha256"] = fingerprint(path)

    def resolve() -> str:
        runs = config.expand_sweep(config.validate({"data": data}))
        plan.resolve_tables(runs, cache=tmp_path / "cache.json")
        return runs["base"]["config"]["data"]["table"]["sha256"]

    pd.DataFrame({"a": [1.0, 3.0], "y": [0, 1]}).to_csv(path, index=False)
    with pytest.raises(config.ConfigError, match="HINT: the table changed; restore it, or update/clear"):
        resolve()
    new = fingerprint(path)
    if fix == "restore":
        path.write_bytes(original)
    else:
        data["table"]["sha256"] = new if fix == "update" else None
    assert resolve() == (data["table"]["sha256"] if fix == "restore" else new)


@pytest.mark.parametrize(
    ("data", "fixed"),
    [
        ({"source": "table"}, {"table": {"path": "data/train.csv", "features": ["x1", "x2"], "label": "y"}}),
        ({"source": "module"}, {"module": "package.module:ClassName"}),
    ],
)
def test_cross_key_rules_pass_once_the_hinted_keys_are_set(data, fixed):
    with pytest.raises(config.ConfigError, match="HINT: "):
        config.validate({"data": data})
    assert config.validate({"data": {**data, **fixed}})["data"]["source"] == data["source"]
