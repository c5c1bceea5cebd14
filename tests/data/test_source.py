"""A table's files: formats by name, hive folders' values."""

from __future__ import annotations

import pytest

from snakeddp.data.source import hive_values, table_files
from snakeddp.errors import TableError


def test_unknown_formats_and_missing_paths_are_explained(tmp_path):
    (tmp_path / "t.txt").write_text("a\n1\n")
    with pytest.raises(TableError, match="cannot tell the table format.*HINT: set data.table.format"):
        table_files(tmp_path / "t.txt")
    assert table_files(tmp_path / "t.txt", "csv") == ("csv", [tmp_path / "t.txt"])
    with pytest.raises(TableError, match="no such file or folder.*HINT: set data.table.path to the file or folder"):
        table_files(tmp_path / "nope.csv")
    # A slip of the name: the HINT names the table beside it, and that path is one.
    with pytest.raises(TableError, match="HINT: did you mean") as caught:
        table_files(tmp_path / "t.tx")
    named = str(caught.value).split("did you mean ")[1].split("?")[0].strip("'")
    assert table_files(named, "csv") == ("csv", [tmp_path / "t.txt"])


def test_folder_values_are_unescaped_and_a_default_partition_is_null():
    assert hive_values("region=0/site=a%3Db%20c/part-0.parquet") == {"region": "0", "site": "a=b c"}
    assert hive_values("region=__HIVE_DEFAULT_PARTITION__/part-0.csv") == {"region": None}
    assert hive_values("2024/region=1/part.parquet") == {"region": "1"}, "a folder that is no key=value is skipped"
    assert hive_values("a=1.parquet") == hive_values("part.parquet") == {}, "a file's own name is no folder"
