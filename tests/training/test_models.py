"""Built-in models by name (and what they log, exactly), your own by model.target, both sized from the data's task."""

from __future__ import annotations

import textwrap

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from snakeddp import config
from snakeddp.config.targets import TargetError
from snakeddp.training.models import MLP, StepLoss, build_model

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
    model = build_model(model_cfg(target="mymodels:Sized", kwargs={}), TASK)
    assert model.net[0].in_features == 7, "left out, as the HINT says: the data's value"


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


class StepLosses(pl.Callback):
    """The loss and size of every training batch, and train_loss as Lightning reports it per epoch."""

    def __init__(self):
        self.steps, self.epochs = [], []

    def on_train_epoch_start(self, trainer, pl_module):
        self.steps.append([])

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.steps[-1].append((float(outputs["loss"]), len(batch[0])))

    def on_train_epoch_end(self, trainer, pl_module):
        self.epochs.append(float(trainer.callback_metrics["train_loss"]))


@pytest.mark.parametrize("name", ["linear", "mlp"])
def test_train_loss_is_the_sample_weighted_mean_of_each_epochs_steps(name):
    torch.manual_seed(0)
    features, labels = torch.randn(20, 3), torch.randint(0, 2, (20, 1)).float()
    loader = DataLoader(TensorDataset(features, labels), batch_size=7, shuffle=True)  # batches of 7, 7, 6
    model = build_model(
        {"name": name, "hidden_sizes": [4], "optimizer": "sgd", "lr": 0.5, "weight_decay": 0.0},
        {"num_features": 3, "num_classes": 1},
    )
    record = StepLosses()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[record],
    )
    trainer.fit(model, train_dataloaders=loader)
    expected = [sum(loss * n for loss, n in steps) / sum(n for _, n in steps) for steps in record.steps]
    assert len(record.epochs) == 3
    assert record.epochs == pytest.approx(expected, rel=1e-6)
    assert len(set(record.epochs)) == 3, "each epoch reports its own steps only"


def test_the_step_loss_is_sample_weighted_and_shows_a_nan():
    loss = StepLoss()
    loss.update(torch.tensor(1.0), 2)
    loss.update(torch.tensor(4.0), 1)
    assert float(loss.compute()) == pytest.approx(2.0)
    # MeanMetric dropped NaN values with a warning: a diverged epoch looked finite.
    loss.update(torch.tensor(float("nan")), 3)
    assert torch.isnan(loss.compute())
    loss.reset()
    loss.update(torch.tensor(3.0), 5)
    assert float(loss.compute()) == pytest.approx(3.0)


@pytest.mark.parametrize("name", ["linear", "mlp"])
@pytest.mark.parametrize("shape", [(12,), (12, 1)])
def test_builtin_binary_models_take_labels_shaped_n_or_n_by_1(name, shape):
    model = build_model(model_cfg(name=name), {"num_features": 4, "num_classes": 1, "kind": "binary"})
    features, labels = torch.randn(12, 4), torch.randint(0, 2, shape)
    loss = model.training_step((features, labels), 0)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(model(features), labels.reshape(12, 1).float())
    assert torch.isclose(loss, expected)


def test_builtin_multiclass_models_take_class_indices_shaped_n_or_n_by_1():
    model = build_model(model_cfg(name="linear"), TASK)
    features, labels = torch.randn(6, 7), torch.randint(0, 3, (6, 1))
    assert torch.isclose(model.training_step((features, labels), 0), model.training_step((features, labels[:, 0]), 0))


def test_labels_of_another_shape_are_refused_in_one_line_saying_what_the_model_takes():
    model = build_model(model_cfg(name="linear"), {"num_features": 4, "num_classes": 1, "kind": "binary"})
    with pytest.raises(config.ConfigError, match=r"takes one 0/1 label per sample, shaped \(N,\) or \(N, 1\).*HINT"):
        model.training_step((torch.randn(6, 4), torch.zeros(6, 2)), 0)


def test_a_target_that_takes_the_task_from_a_datamodule_without_one_says_where_it_goes(user_module):
    """data.source: module with a DataModule of the user's that has no `task`: the constructor's TypeError ('missing
    2 required positional arguments') came under a HINT to check the config's keyword arguments."""
    with pytest.raises(TargetError) as refused:
        build_model(model_cfg(target="mymodels:Sized", kwargs={"hidden": 4}), None)
    assert str(refused.value) == (
        "model.target='mymodels:Sized' takes num_features and num_classes from the data, and the DataModule has no "
        "`task` that gives them. HINT: set self.task = {'num_features': ..., 'num_classes': ...} in the DataModule's "
        "__init__, or give model.kwargs.num_features."
    )
    model = build_model(model_cfg(target="mymodels:Sized", kwargs={"hidden": 4}), TASK)  # the task, as hinted
    assert model.net[0].in_features == 7
    given = build_model(model_cfg(target="mymodels:Sized", kwargs={"num_features": 5, "num_classes": 2}), None)
    assert given.net[1].out_features == 2
