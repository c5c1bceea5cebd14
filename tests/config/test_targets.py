"""Classes named by import path: every way it can fail is one error naming the key, the target and the cause."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import lightning.pytorch as pl
import pytest
import torch

from snakeddp.config.targets import TargetError, check_keywords, construct, load_class, source_record
from tests.helpers import SRC, subprocess_env

USER_MODULE = """
import lightning.pytorch as pl
import torch


class Good(pl.LightningModule):
    def __init__(self, width: int = 4):
        super().__init__()
        self.width = width


class Picky(pl.LightningModule):
    def __init__(self, width: int):
        super().__init__()
        if width < 1:
            raise ValueError("width must be positive")


class Open(pl.LightningModule):
    def __init__(self, width: int = 4, **options):
        super().__init__()


class NotAModule:
    pass
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "usermodels.py").write_text(textwrap.dedent(USER_MODULE))
    (tmp_path / "broken.py").write_text("import does_not_exist_anywhere\n")
    (tmp_path / "needs_sklearn.py").write_text("from sklearn.datasets import load_digits\n")
    (tmp_path / "badsyntax.py").write_text("x = 1\ndef f(:\n")
    (tmp_path / "raises.py").write_text("import math\nWIDTH = 1 / 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_loads_the_named_class(user_module):
    cls = load_class("usermodels:Good", "model.target", pl.LightningModule)
    assert cls.__name__ == "Good" and construct(cls, {"width": 3}, "usermodels:Good", "model.target").width == 3


@pytest.mark.parametrize(
    ("target", "cause"),
    [
        ("no_such_package.models:Net", "cannot import module 'no_such_package.models' (ModuleNotFoundError"),
        ("broken:Net", "module 'broken' imports 'does_not_exist_anywhere', which is not installed"),
        ("usermodels:Missing", "has no attribute 'Missing'"),
        ("usermodels:NotAModule", "is not a subclass of lightning.pytorch.core.module.LightningModule"),
        ("usermodels.Good", "is not an import path"),
    ],
)
def test_import_failures_name_the_target_and_the_cause(user_module, target, cause):
    with pytest.raises(TargetError) as error:
        load_class(target, "model.target", pl.LightningModule)
    assert f"model.target={target!r}" in str(error.value) and cause in str(error.value)
    assert "HINT" in str(error.value)


@pytest.mark.parametrize(
    ("kwargs", "cause"),
    [({"width": 0}, "ValueError: width must be positive"), ({"depth": 2}, "TypeError: ")],
    ids=["raised-in-its-code", "an-argument-it-does-not-take"],
)
def test_construction_failures_name_the_target_the_arguments_and_the_cause(user_module, kwargs, cause):
    cls = load_class("usermodels:Picky", "model.target", pl.LightningModule)
    with pytest.raises(TargetError) as error:
        construct(cls, kwargs, "usermodels:Picky", "model.target")
    text = str(error.value)
    assert "model.target='usermodels:Picky'" in text and cause in text
    assert ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) in text
    assert error.value.__cause__ is not None, "the original exception stays chained for the traceback"
    if "depth" in kwargs:
        assert "HINT: check the keyword arguments in the config" in text
    else:  # the line of the user's code that raised, not a keyword the config could fix
        assert re.search(r"HINT: the constructor's code failed at \S*usermodels.py:\d+: fix it there", text), text
    assert construct(cls, {"width": 3}, "usermodels:Picky", "model.target").__class__ is cls


def test_an_import_failure_says_which_of_its_causes_it_is_and_the_fix_for_that_one(user_module, monkeypatch):
    """Not found (put it where snakemake runs), a dependency not installed (the command that installs it, under
    its name on PyPI), its own code failing (where): one HINT each, not the first for all three."""
    monkeypatch.chdir(user_module)
    said = {}
    for target in ("no_such_package.models:Net", "mynet:Net", "needs_sklearn:Net", "badsyntax:Net", "raises:Net"):
        with pytest.raises(TargetError) as error:
            load_class(target, "model.target", pl.LightningModule)
        said[target] = str(error.value)
    assert "put the module in the directory snakemake runs from" in said["no_such_package.models:Net"]
    # Not an installed module's name, however close (the standard library's netrc).
    assert "put the module in the directory snakemake runs from" in said["mynet:Net"], said["mynet:Net"]
    # A typo of a module that is there: the HINT names it (it said to put the module where it already was).
    (user_module / "mypkg").mkdir()
    (user_module / "mypkg" / "digits_model.py").write_text("")
    typos = {
        "mypkg.digits_modle:Net": "mypkg.digits_model:Net",
        "usermodel:Good": "usermodels:Good",
        "mypgk.digits_model:Net": "mypkg.digits_model:Net",  # a folder without __init__.py is a package too
    }
    for typo, meant in typos.items():
        with pytest.raises(TargetError) as error:
            load_class(typo, "model.target", pl.LightningModule)
        assert f"HINT: did you mean {meant!r}?" in str(error.value), str(error.value)
    assert "imports 'sklearn', which is not installed" in said["needs_sklearn:Net"]
    assert "HINT: run `tools/add.sh scikit-learn --stage train`" in said["needs_sklearn:Net"]
    assert "HINT: the module's own code failed at badsyntax.py:2: fix it there" in said["badsyntax:Net"]
    assert "ZeroDivisionError" in said["raises:Net"] and "failed at raises.py:2:" in said["raises:Net"]
    assert all(text.count("HINT:") == 1 for text in said.values()), said


def test_source_record_hashes_the_module_file(user_module):
    cls = load_class("usermodels:Good", "model.target", pl.LightningModule)
    record = source_record("model", cls())
    assert record["target"] == "usermodels:Good" and record["file"].endswith("usermodels.py")
    import hashlib

    assert record["sha256"] == hashlib.sha256((user_module / "usermodels.py").read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("target", "hint", "fixed"),
    [
        ("usermodels.Good", "write it as 'package.module:ClassName'", "usermodels:Good"),
        ("usermodels:Goood", "did you mean 'Good'\\?", "usermodels:Good"),
        ("usermodels:NotAModule", "point model.target at a LightningModule class", "usermodels:Good"),
    ],
)
def test_targets_fixed_as_hinted_load(user_module, target, hint, fixed):
    with pytest.raises(TargetError, match=f"HINT: {hint}"):
        load_class(target, "model.target", pl.LightningModule)
    assert load_class(fixed, "model.target", pl.LightningModule).__name__ == "Good"


def test_a_base_named_by_import_path_checks_as_the_class_does(user_module):
    base = "lightning.pytorch.core.module:LightningModule"
    assert load_class("usermodels:Good", "model.target", base).__name__ == "Good"
    with pytest.raises(TargetError) as by_name:
        load_class("usermodels:NotAModule", "model.target", base)
    with pytest.raises(TargetError) as by_class:
        load_class("usermodels:NotAModule", "model.target", pl.LightningModule)
    assert str(by_name.value) == str(by_class.value)


@pytest.mark.parametrize(
    ("pair", "cause"),
    [
        (
            ("model.target", "plain:Net", ""),
            "is not a subclass of lightning.pytorch.core.module.LightningModule. HINT: ",
        ),
        (
            ("data.module", "plain:Net", ""),
            "is not a subclass of lightning.pytorch.core.datamodule.LightningDataModule",
        ),
        (("model.target", "no_such_module:Net", "width"), "cannot import module 'no_such_module'"),
    ],
)
def test_the_workflows_check_refuses_what_is_no_lightning_class_without_importing_lightning(user_module, pair, cause):
    """`python -m snakeddp.config.targets` (the preflight's, in the training interpreter): what imports no
    Lightning cannot be a Lightning class, and is refused as before, in a fraction of Lightning's import."""
    (user_module / "plain.py").write_text("class Net:\n    pass\n")
    probe = (
        "import sys; from snakeddp.config.targets import main; print(main(sys.argv[1:]), 'lightning' in sys.modules)"
    )
    env = subprocess_env(PYTHONPATH=os.pathsep.join([str(user_module), str(SRC)]))
    done = subprocess.run([sys.executable, "-c", probe, *pair], env=env, capture_output=True, text=True, check=False)
    assert done.stdout.split() == ["1", "False"], done.stdout + done.stderr
    assert f"{pair[0]}={pair[1]!r}" in done.stderr and cause in done.stderr


def test_a_constructor_argument_the_class_does_not_take_is_named_with_the_closest_it_does(user_module):
    good = load_class("usermodels:Good", "model.target", pl.LightningModule)
    check_keywords(good, ["width"], "usermodels:Good", "model.target")
    with pytest.raises(TargetError) as caught:
        check_keywords(good, ["width", "widht"], "usermodels:Good", "model.target")
    assert str(caught.value) == (
        "model.kwargs.widht: model.target='usermodels:Good' takes no 'widht' (its constructor takes width). "
        "HINT: did you mean 'width'?"
    )
    # A constructor that takes **options may take any name.
    check_keywords(
        load_class("usermodels:Open", "model.target", pl.LightningModule), ["depth"], "usermodels:Open", "model.target"
    )


def test_a_constructor_parameter_neither_the_config_nor_snakeddp_gives_is_named_before_any_job(user_module):
    """A model taking in_dim (not num_features) was refused by its train job, after the data stage, with a HINT to
    'check the keyword arguments in the config against the class's constructor'."""
    (user_module / "ownnames.py").write_text(
        "import lightning.pytorch as pl\n\n\nclass Net(pl.LightningModule):\n"
        "    def __init__(self, in_dim, num_classes, *, hidden, lr=0.1):\n        super().__init__()\n"
    )
    cls = load_class("ownnames:Net", "model.target", pl.LightningModule)
    with pytest.raises(TargetError) as caught:
        check_keywords(cls, ["lr"], "ownnames:Net", "model.target")
    assert str(caught.value) == (
        "model.kwargs: model.target='ownnames:Net' needs 'in_dim', 'hidden', which the config does not give. "
        "HINT: set model.kwargs.in_dim, or, where it is the data's own value, name the parameter num_features or "
        "num_classes: snakeddp passes those."
    )
    check_keywords(cls, ["in_dim", "hidden"], "ownnames:Net", "model.target")  # the HINT's first way
    # The names as the workflow's check hands them over (an iterator) serve both checks.
    picky = load_class("usermodels:Picky", "model.target", pl.LightningModule)
    with pytest.raises(TargetError, match=r"needs 'width'.*HINT: set model.kwargs.width"):
        check_keywords(picky, iter([]), "usermodels:Picky", "model.target")


def test_an_error_in_an_installed_model_the_config_names_is_one_line_with_a_hint_that_works(tmp_path):
    """Lightning's BoringModel as model.target (docs: any installed LightningModule) failed at its first step with
    a 150-line traceback: no frame was the user's, so the error read as a bug of snakeddp's."""
    from lightning.pytorch.demos import BoringModel

    from snakeddp.config.targets import defining_files
    from snakeddp.train import users_error

    batch = (torch.zeros(4, 32), torch.zeros(4, dtype=torch.long))  # what a table's partitions give a step
    with pytest.raises(TypeError) as raised:
        BoringModel().training_step(batch, 0)
    # As a rank sees it: the step is called by Lightning's loop, not from a file of the user's (this test's).
    error = raised.value.with_traceback(raised.value.__traceback__.tb_next)
    cfg = {"model": {"target": "lightning.pytorch.demos:BoringModel"}, "data": {"module": None}}
    configured = defining_files(cfg)
    assert set(configured.values()) == {"model.target"} and all(p.name == "boring_classes.py" for p in configured)
    assert users_error(error, None) is None, "with no class named, a frame of no one's is a bug of ours"
    line = users_error(error, tmp_path / "failure.txt", configured)
    assert line is not None and "\n" not in line and line.count("HINT:") == 1, line
    assert line.startswith("TypeError: linear(): argument 'input' (position 1) must be Tensor, not tuple"), line
    assert "boring_classes.py:" in line and "in the class model.target names" in line, line
    assert "(the whole traceback: " + str(tmp_path / "failure.traceback") in line, line
