"""File placement never writes through a hard link into someone else's file."""

from __future__ import annotations

import os

from snakeddp.util.fsutil import copy_file, link_or_copy


def test_link_or_copy_links_and_replaces_without_touching_the_old_targets_source(tmp_path):
    users = tmp_path / "users-config.yaml"
    users.write_text("mine\n")
    other = tmp_path / "other.yaml"
    other.write_text("theirs\n")
    target = tmp_path / "crate" / "config.yaml"
    link_or_copy(users, target)
    assert os.path.samefile(users, target)

    link_or_copy(other, target)  # same name, another source: replace the link, never write through it
    assert users.read_text() == "mine\n"
    assert target.read_text() == "theirs\n" and os.path.samefile(other, target)
    link_or_copy(other, target)  # already in place: nothing to do, nothing left behind
    assert sorted(p.name for p in target.parent.iterdir()) == ["config.yaml"]


def test_copy_file_onto_a_hard_link_leaves_the_linked_file_alone(tmp_path):
    users = tmp_path / "users.yaml"
    users.write_text("mine\n")
    target = tmp_path / "copy.yaml"
    os.link(users, target)
    other = tmp_path / "other.yaml"
    other.write_text("theirs\n")
    copy_file(other, target)
    assert users.read_text() == "mine\n" and target.read_text() == "theirs\n"
    assert not os.path.samefile(users, target)
