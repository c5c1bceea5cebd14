"""snakeddp.util.paths: a name read from a file stays inside its directory, or is refused."""

from __future__ import annotations

import os

import pytest

from snakeddp.util.paths import inside


@pytest.mark.parametrize(
    "name",
    ["../x", "a/../../x", "/etc/passwd", "", ".", "a\\..\\x", "a\0b", None, 3, ["a"], "a/b/../../../x"],
)
def test_names_that_leave_the_directory_or_are_not_names_are_refused(tmp_path, name):
    assert inside(tmp_path, name) is None


def test_names_inside_are_joined(tmp_path):
    assert inside(tmp_path, "train/part-00000.safetensors") == tmp_path / "train" / "part-00000.safetensors"
    assert inside(tmp_path, "./val.safetensors") == tmp_path / "val.safetensors"


def test_a_link_out_of_the_directory_is_refused_and_one_inside_is_kept(tmp_path):
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    (elsewhere / "secret").write_text("x")
    os.symlink(elsewhere, root / "out")
    os.symlink(root / "real", root / "alias")
    assert inside(root, "out/secret") is None
    assert inside(root, "alias") == root / "alias"


def test_a_directory_reached_through_a_link_may_hold_its_own_files(tmp_path):
    (tmp_path / "scratch" / "data").mkdir(parents=True)
    os.symlink(tmp_path / "scratch", tmp_path / "results")
    assert inside(tmp_path / "results" / "data", "train/p") == tmp_path / "results" / "data" / "train" / "p"
