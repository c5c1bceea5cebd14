"""The config as Snakemake puts it together, with a sweep replaced whole."""

from __future__ import annotations

import copy

import pytest
import yaml

from snakeddp import config
from snakeddp.config import layers

BASE = {"trainer": {"max_epochs": 3, "batch_size": 32}, "sweep": {"launch.devices": [1, 2]}}


def test_a_given_sweep_replaces_the_files_sweep_and_other_sections_still_merge_key_by_key():
    mine = {"trainer": {"max_epochs": 1}, "sweep": {"model.lr": [0.1, 0.01]}}
    composed = layers.compose(BASE, [mine])
    assert composed["sweep"] == {"model.lr": [0.1, 0.01]}
    assert composed["trainer"] == {"max_epochs": 1, "batch_size": 32}
    assert BASE["sweep"] == {"launch.devices": [1, 2]}, "the base is not changed"


def test_the_last_sweep_given_wins_whole_and_none_given_keeps_the_files():
    files = [{"sweep": {"model.lr": [0.1]}}, {"sweep": {"seed": [1, 2]}}]
    assert layers.compose(BASE, files)["sweep"] == {"seed": [1, 2]}
    assert layers.compose(BASE, [*files, {"sweep": {}}])["sweep"] == {}, "--config sweep={} asks for one run"
    assert layers.compose(BASE, [{"seed": 3}])["sweep"] == BASE["sweep"]


def test_command_line_values_take_the_schemas_types():
    layer = layers.command_line_config(["trainer={max_epochs: 3}", "sweep={model.lr: [0.1, 1e-3]}", "seed=7"])
    assert layer == {"trainer": {"max_epochs": 3}, "sweep": {"model.lr": [0.1, 0.001]}, "seed": 7}
    runs = config.expand_sweep(config.validate(layers.compose(BASE, [layer])))
    assert list(runs) == ["lr-0.1", "lr-0.001"]


def test_a_config_entry_without_a_value_is_refused_and_the_hinted_form_works():
    with pytest.raises(config.ConfigError) as caught:
        layers.command_line_config(["trainer"])
    (line,) = str(caught.value).splitlines()
    assert "HINT: write it as snakemake takes it, e.g. --config 'trainer={max_epochs: 3}'" in line
    assert layers.command_line_config(["trainer={max_epochs: 3}"]) == {"trainer": {"max_epochs": 3}}


def test_config_files_that_cannot_be_read_are_one_line_each_and_an_existing_file_loads(tmp_path):
    broken, listed = tmp_path / "broken.yaml", tmp_path / "list.yaml"
    broken.write_text("model: [unclosed\n")
    listed.write_text("- 1\n")
    for path, words in ((tmp_path / "missing.yaml", "HINT: give the path of an existing config file"),
                        (broken, "not valid YAML"), (listed, "not a mapping of keys")):  # fmt: skip
        with pytest.raises(config.ConfigError) as caught:
            layers.load_layer(path)
        (line,) = str(caught.value).splitlines()
        assert words in line and "HINT:" in line
    mine = tmp_path / "my-sweep.yaml"
    mine.write_text(yaml.safe_dump({"sweep": {"seed": [1]}}))
    assert layers.load_layer(mine) == {"sweep": {"seed": [1]}}


def test_an_empty_mapping_given_empties_the_files_and_only_what_comes_after_it_fills_it():
    """--config 'model={kwargs: {}}' left config/config.yaml's model.kwargs as they were: merged key by key, an
    empty mapping changes nothing (Snakemake's update_config, which the workflow's config went through)."""
    from snakemake.utils import update_config

    base = {"model": {"target": "m:Net", "kwargs": {"width": 64, "depth": 3}}, "sweep": {"seed": [1]}}
    typed = layers.command_line_config(["model={kwargs: {}}"])
    assert layers.compose(base, [typed])["model"] == {"target": "m:Net", "kwargs": {}}
    merged = copy.deepcopy(base)
    update_config(merged, typed)  # as Snakemake merges --config into the file's config
    assert merged["model"]["kwargs"] == {"width": 64, "depth": 3}, "Snakemake's merge keeps the file's"
    assert layers.replace_emptied(merged, [typed])["model"] == {"target": "m:Net", "kwargs": {}}
    # A --configfile empties them, --config then gives one: only that one; a section emptied takes the defaults.
    file, then = {"model": {"kwargs": {}}}, layers.command_line_config(["model={kwargs: {depth: 2}}"])
    assert layers.compose(base, [file, then])["model"]["kwargs"] == {"depth": 2}
    assert layers.compose(base, [then, file])["model"]["kwargs"] == {}
    assert layers.compose(base, [{"model": {}}])["model"] == {}
    assert config.validate(layers.compose(base, [{"model": {}}]))["model"]["kwargs"] == {}
    assert layers.compose(base, [{"sweep": {}}])["sweep"] == {}, "the sweep's own rule: replaced whole"
    assert layers.compose(base, [{"model": {"kwargs": {"depth": 5}}}])["model"]["kwargs"] == {"width": 64, "depth": 5}


def test_a_null_typed_for_a_kwargs_key_removes_the_files_key_and_a_files_null_stays_a_value():
    """config/config.yaml's model.kwargs.dropout could not be taken away from the command line: Snakemake's parser
    reads the typed null as the text 'null' (YAML's BaseLoader), which became None, passed to the constructor."""
    from snakemake.cli import parse_config
    from snakemake.utils import update_config

    base = {"model": {"target": "m:Net", "kwargs": {"width": 64, "dropout": 0.1}}, "network": {"env": {"A": "1"}}}
    entries = ["model={kwargs: {dropout: null}}", "network={env: {A: ~}}"]
    snakemakes = parse_config(entries)
    assert snakemakes["model"]["kwargs"] == {"dropout": "null"}, "Snakemake's own reading of the typed null"
    typed = layers.command_line_config(entries)
    assert typed["model"]["kwargs"] == {"dropout": None}
    # As the workflow puts it together (plan._validated): Snakemake's merge, the typed values over it, then this.
    merged = copy.deepcopy(base)
    update_config(merged, snakemakes)
    update_config(merged, typed)
    assert merged["model"]["kwargs"] == {"width": 64, "dropout": None}, "without it: dropout=None, not removed"
    removed = layers.remove_nulled(merged, typed)
    # network.env's values are text: a typed ~ is the text "~" (a path), as it was, not a removal.
    assert removed["model"]["kwargs"] == {"width": 64} and removed["network"]["env"] == {"A": "~"}
    assert layers.remove_nulled(layers.compose(base, [typed]), typed)["model"]["kwargs"] == {"width": 64}
    # A null the schema types (model.target: null trains model.name) is the key's value; so is a file's kwargs null.
    target = layers.command_line_config(["model={target: null}"])
    assert layers.remove_nulled(layers.compose(base, [target]), target)["model"]["target"] is None
    file = {"model": {"kwargs": {"dropout": None}}}
    assert layers.compose(base, [file])["model"]["kwargs"] == {"width": 64, "dropout": None}
    # A null in the sweep is one of its values, not a removal.
    swept = layers.command_line_config(["sweep={model.kwargs.dropout: [null, 0.2]}"])
    assert layers.remove_nulled(layers.compose(base, [swept]), swept)["sweep"] == {"model.kwargs.dropout": [None, 0.2]}
