"""Built-in models by name, your own by model.target, both sized from the data's task."""

from __future__ import annotations

import textwrap

import pytest

from snakeddp import config
from snakeddp.models import MLP, build_model
from snakeddp.targets import TargetError

TASK = {"num_features": 7, "num_classes": 3, "kind": "multiclass"}

USER_MODULE = """
import lightning.pytorch as pl
from torch import nn


class Sized(pl.LightningModule):
    def __init__(self, num_features: int, num_classes: int, hidden: int = 8):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(num_features, hidden), nn.Linear(hidden, num_classes))


class Shapeless(pl.LightningModule):
    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.scale = scale
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "mymodels.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))


def model_cfg(**overrides):
    return config.validate({"model": overrides})["model"]


def test_builtin_by_name_sized_from_task():
    model = build_model(model_cfg(name="mlp", hidden_sizes=[5]), TASK)
    assert isinstance(model, MLP) and model.net[0].in_features == 7 and model.net[-1].out_features == 3


def test_target_gets_the_task_values_its_constructor_names(user_module):
    model = build_model(model_cfg(target="mymodels:Sized", kwargs={"hidden": 4}), TASK)
    assert type(model).__name__ == "Sized"
    assert (model.net[0].in_features, model.net[0].out_features, model.net[1].out_features) == (7, 4, 3)


def test_target_without_task_parameters_gets_only_its_kwargs(user_module):
    model = build_model(model_cfg(target="mymodels:Shapeless", kwargs={"scale": 2.0}), TASK)
    assert model.scale == 2.0


def test_kwargs_contradicting_the_data_are_refused(user_module):
    with pytest.raises(TargetError, match="model.kwargs.num_features=9 contradicts the data, which has num_features=7"):
        build_model(model_cfg(target="mymodels:Sized", kwargs={"num_features": 9}), TASK)
    model = build_model(model_cfg(target="mymodels:Sized", kwargs={"num_features": 7}), TASK)
    assert model.net[0].in_features == 7, "agreeing with the data is fine"


def test_target_failure_names_the_target(user_module):
    with pytest.raises(
        TargetError, match=r"model.target='mymodels:Sized': Sized\(.*hidden='wide'.*\) failed: TypeError"
    ):
        build_model(model_cfg(target="mymodels:Sized", kwargs={"hidden": "wide"}), TASK)


def test_builtin_without_a_task_explains_what_is_missing():
    with pytest.raises(TargetError, match="model.name=mlp needs the data's num_features and num_classes"):
        build_model(model_cfg(), None)


def test_target_is_validated_as_an_import_path():
    with pytest.raises(config.ConfigError, match="model.target"):
        config.validate({"model": {"target": "not a path"}})
