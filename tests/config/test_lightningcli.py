"""LightningCLI's class_path + init_args, read as snakeddp's keys before a run's identity is made."""

import re
import shutil

import pytest
import yaml

from snakeddp import config
from snakeddp.config import coerce, lightningcli
from tests.helpers import REPO, TINY, Workflow, leaked

TARGET_FORM = {
    "model": {"target": "examples.tabular.model:TabularNet", "kwargs": {"width": 32, "lr": 0.01}},
    "data": {"source": "module", "module": "pkg.data:Tables", "module_kwargs": {"root": "/data"}},
}
LIGHTNING_FORM = {
    "model": {"class_path": "examples.tabular.model.TabularNet", "init_args": {"width": 32, "lr": 0.01}},
    "data": {"source": "module", "class_path": "pkg.data.Tables", "init_args": {"root": "/data"}},
}


def runs(raw):
    return config.expand_sweep(config.validate(raw))


def test_a_run_written_in_lightningclis_form_is_the_same_run_as_in_snakeddps():
    assert config.validate(LIGHTNING_FORM) == config.validate(TARGET_FORM)
    lightning, ours = runs(LIGHTNING_FORM), runs(TARGET_FORM)
    assert lightning == ours
    (run,) = lightning.values()
    assert run["config"]["model"]["target"] == "examples.tabular.model:TabularNet"
    assert run["config"]["data"]["module"] == "pkg.data:Tables"
    assert "class_path" not in run["config"]["model"] and "init_args" not in run["config"]["data"]
    assert config.dataset_id(run["config"]["data"]) == config.dataset_id(next(iter(ours.values()))["config"]["data"])


def test_the_config_given_is_left_as_it_was():
    raw = {"model": {"class_path": "a.b.C", "init_args": {"width": 8}}}
    config.validate(raw)
    assert raw == {"model": {"class_path": "a.b.C", "init_args": {"width": 8}}}


@pytest.mark.parametrize(
    ("class_path", "target"),
    [("a.b.C", "a.b:C"), ("pkg.C", "pkg:C"), ("a.b:C", "a.b:C")],
)
def test_the_dotted_class_path_becomes_an_import_path_at_its_last_dot(class_path, target):
    assert lightningcli.import_path(class_path) == target
    assert config.validate({"model": {"class_path": class_path}})["model"]["target"] == target


def test_sweeps_over_init_args_are_sweeps_over_kwargs_with_the_same_run_ids():
    lightning = {"model": LIGHTNING_FORM["model"], "sweep": {"model.init_args.width": [8, 16], "seed": [1, 2]}}
    ours = {"model": TARGET_FORM["model"], "sweep": {"model.kwargs.width": [8, 16], "seed": [1, 2]}}
    assert list(runs(lightning)) == ["width-8_seed-1", "width-8_seed-2", "width-16_seed-1", "width-16_seed-2"]
    assert runs(lightning) == runs(ours)
    swept = runs({"sweep": {"model.class_path": ["a.b.C", "a.b.D"]}})
    assert [run["config"]["model"]["target"] for run in swept.values()] == ["a.b:C", "a.b:D"]
    data = runs({"data": {"source": "module", "class_path": "p.D"}, "sweep": {"data.init_args.size": [1, 2]}})
    assert [run["config"]["data"]["module_kwargs"] for run in data.values()] == [{"size": 1}, {"size": 2}]


@pytest.mark.parametrize(
    ("raw", "theirs", "ours"),
    [
        ({"model": {"class_path": "a.b.C", "kwargs": {"width": 8}}}, "model.class_path", "model.kwargs"),
        ({"model": {"target": "a.b:C", "init_args": {"width": 8}}}, "model.init_args", "model.target"),
        ({"data": {"source": "module", "module": "a.b:D", "class_path": "a.b.D"}}, "data.class_path", "data.module"),
    ],
)
def test_a_section_that_mixes_the_two_forms_is_refused_and_its_hint_works(raw, theirs, ours):
    with pytest.raises(config.ConfigError) as refused:
        config.validate(raw)
    (line,) = str(refused.value).splitlines()
    assert f"mixes LightningCLI's form ({theirs}) with snakeddp's ({ours})" in line and "HINT: write" in line
    # As the HINT says: the section written one way, either one, is accepted, and is the same run.
    name = theirs.split(".")[0]
    lightning, ours = (config.validate({**raw, name: one_way(raw[name], name, form)}) for form in (True, False))
    assert lightning == ours


def one_way(section, name, lightning):
    """``section`` with its class and arguments (in whichever spelling) written in one form."""
    target_key, kwargs_key = lightningcli.OURS[name]
    named = section.get("class_path") or section[target_key].replace(":", ".")
    arguments = section.get("init_args", section.get(kwargs_key, {}))
    spelled = ("class_path", "init_args", target_key, kwargs_key)
    rest = {key: value for key, value in section.items() if key not in spelled}
    if lightning:
        return {**rest, "class_path": named, "init_args": arguments}
    return {**rest, target_key: lightningcli.import_path(named), kwargs_key: arguments}


def test_init_args_without_a_class_path_are_refused_and_the_hint_works():
    with pytest.raises(config.ConfigError) as refused:
        config.validate({"model": {"init_args": {"width": 8}}})
    (line,) = str(refused.value).splitlines()
    assert "model.init_args only applies with model.class_path" in line
    assert "HINT: set model.class_path as well, or remove model.init_args." in line
    assert config.validate({"model": {"class_path": "a.b.C", "init_args": {"width": 8}}})["model"]["kwargs"] == {
        "width": 8
    }


def test_a_class_path_without_a_module_is_refused_and_the_hint_works():
    with pytest.raises(config.ConfigError) as refused:
        config.validate({"model": {"class_path": "TabularNet"}})
    (line,) = str(refused.value).splitlines()
    assert "model.class_path='TabularNet' names no module" in line
    assert "HINT: write it as LightningCLI does, 'package.module.ClassName'" in line
    fixed = config.validate({"model": {"class_path": "examples.tabular.model.TabularNet"}})
    assert fixed["model"]["target"] == "examples.tabular.model:TabularNet"


def test_the_same_swept_key_in_both_spellings_is_refused_and_the_hint_works():
    raw = {"model": {"class_path": "a.b.C"}, "sweep": {"model.kwargs.width": [8], "model.init_args.width": [16]}}
    with pytest.raises(config.ConfigError) as refused:
        config.validate(raw)
    (line,) = str(refused.value).splitlines()
    assert "sweep gives model.kwargs.width twice" in line
    assert "HINT: keep one of sweep.model.init_args.width and sweep.model.kwargs.width" in line
    del raw["sweep"]["model.kwargs.width"]
    assert list(runs(raw)) == ["width-16"]


def test_a_wrong_type_is_named_as_it_was_written():
    with pytest.raises(config.ConfigError) as refused:
        config.validate({"model": {"class_path": "a.b.C", "init_args": "width=8"}})
    assert "model.init_args: 'width=8' is not of type 'object'" in str(refused.value)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"model": {"class_path": "pkg.mod.Net", "init_args": {"hub": {"api_token": "hub-tok-2b7e"}}}},
         "model.kwargs.hub.api_token"),
        ({"data": {"source": "module", "class_path": "pkg.mod.Data", "init_args": {"db_password": 'p"w 9c1d'}}},
         "data.module_kwargs.db_password"),
        ({"model": {"class_path": "pkg.mod.Net"}, "sweep": {"model.init_args.registry_token": ["reg-1-5e3c"]}},
         "model.kwargs.registry_token"),
    ],
)  # fmt: skip
def test_a_secret_in_init_args_is_refused_as_in_kwargs_without_its_value(raw, key):
    with pytest.raises(config.ConfigError) as refused:
        runs(raw)
    (line,) = str(refused.value).splitlines()
    assert f"{key} looks like a secret" in line and "HINT: remove it from the config, export it" in line
    assert not leaked(line, ("hub-tok-2b7e", 'p"w 9c1d', "aws-key-6f0a", "reg-1-5e3c"))


def test_a_built_in_model_key_beside_class_path_is_refused_as_beside_target():
    with pytest.raises(config.ConfigError) as refused:
        config.validate({"model": {"class_path": "a.b.C", "lr": 0.1}})
    assert "model.lr configures the built-in models, and model.target is set" in str(refused.value)
    fixed = config.validate({"model": {"class_path": "a.b.C", "init_args": {"lr": 0.1}}})
    assert fixed["model"]["kwargs"] == {"lr": 0.1}


def test_command_line_values_under_init_args_are_typed_as_under_kwargs():
    """snakemake --config model='{class_path: a.b.C, init_args: {width: 8}}' hands every scalar over as a string."""
    given = {"model": {"class_path": "a.b.C", "init_args": {"width": "8", "lr": "1e-3"}}}
    typed = coerce.command_line(given, config.load_schema())
    assert typed["model"]["init_args"] == {"width": 8, "lr": 0.001}
    assert config.validate(typed)["model"]["kwargs"] == {"width": 8, "lr": 0.001}


def test_the_print_config_pasted_in_the_docs_is_read_as_the_examples_model():
    page = (REPO / "docs" / "customising.md").read_text()
    (printed,) = [block for block in re.findall(r"```yaml\n(.*?)```", page, flags=re.S) if "class_path" in block]
    pasted = yaml.safe_load(printed)["model"]
    model = config.validate({"model": pasted})["model"]
    example = yaml.safe_load((REPO / "examples" / "tabular" / "config.yaml").read_text())["model"]
    assert model["target"] == example["target"] and model["kwargs"] == pasted["init_args"]
    assert example["kwargs"].items() <= model["kwargs"].items()


@pytest.mark.e2e
def test_snakemake_says_a_mixed_section_once_and_plans_the_run_once_it_is_written_one_way(tmp_path):
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    workflow = Workflow(tmp_path)
    mixed = {"class_path": "examples.tabular.model.TabularNet", "kwargs": {"width": 16}}
    workflow.write_config({**TINY, "model": mixed})
    done = workflow.run("--dry-run", check=False)
    said = [line for line in (done.stdout + done.stderr).splitlines() if "mixes LightningCLI's form" in line]
    assert done.returncode != 0 and len(said) == 1 and "HINT: write model one way" in said[0], done.stderr
    workflow.write_config({**TINY, "model": {"class_path": mixed["class_path"], "init_args": mixed["kwargs"]}})
    assert workflow.planned_jobs().get("train") == 1
