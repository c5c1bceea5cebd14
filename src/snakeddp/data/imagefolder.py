"""A folder of image files in class folders, ``<label>/<name>.<ext>`` (the layout torchvision's ``ImageFolder``
reads, and how most teams keep labelled images), read as a table of two columns: ``image`` (the file's bytes)
and ``label`` (the index of its class folder's name in the sorted list of them, the dataset's ``classes``).

Rows are the image files in name order (class folder, then the path below it), so a sample's id is its file's
place in that order. Hidden files and names starting with "_" are skipped, as in a table's folder, and so are
files that are not images by their extension. Nothing outside the folder is read: a file or class folder that
is a link leading out of it stops ingestion naming it, and links to folders are not followed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from snakeddp.data.images import EXTENSIONS
from snakeddp.errors import TableError
from snakeddp.util.paths import inside

IMAGE, LABEL = "image", "label"
COLUMNS = (IMAGE, LABEL)


def is_image(name: str) -> bool:
    return name.lower().endswith(EXTENSIONS)


def _visible(name: str) -> bool:
    return not name.startswith((".", "_"))


def classes(root: Path) -> list[str]:
    """The class folders' names, sorted."""
    return sorted(
        entry.name for entry in os.scandir(root) if entry.is_dir(follow_symlinks=False) and _visible(entry.name)
    )


def image_files(root: str | Path) -> list[Path]:
    """Every image file under the class folders of ``root``, in name order; a TableError for one leading out."""
    root = Path(root)
    found: list[Path] = []
    for name in classes(root):
        # os.walk does not follow links to folders; a linked file is checked to stay inside the folder.
        for folder, folders, files in os.walk(root / name):
            folders[:] = sorted(f for f in folders if _visible(f))
            for file in files:
                if _visible(file) and is_image(file):
                    found.append(Path(folder) / file)
    for path in found:
        if inside(root, path.relative_to(root).as_posix()) is None:
            raise TableError(
                f"{path}: a link to a file outside {root}; snakeddp reads nothing outside the table's folder. "
                "HINT: copy the image into the folder instead of linking it."
            )
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def is_image_folder(root: Path) -> bool:
    """Whether ``root`` is a folder of class folders holding image files (and no CSV or Parquet files)."""
    if not root.is_dir():
        return False
    return any(is_image(p.name) for name in classes(root) for p in (root / name).iterdir())


def chunks(root: Path, files: list[Path], rows: int) -> Iterator[dict[str, np.ndarray]]:
    """The folder as chunks of ``rows`` rows: image bytes (object array) and class indices."""
    names = classes(root)
    index = {name: i for i, name in enumerate(names)}
    for start in range(0, len(files), rows):
        batch = files[start : start + rows]
        data = np.empty(len(batch), dtype=object)  # one bytes object per row (np.array would make a 2-D array)
        data[:] = [p.read_bytes() for p in batch]
        yield {
            IMAGE: data,
            LABEL: np.array([index[p.relative_to(root).parts[0]] for p in batch], dtype=np.int64),
        }
