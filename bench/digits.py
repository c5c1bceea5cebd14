"""scikit-learn's digits (1,797 real 8x8 handwritten digits, packaged with it) as teams keep images: PNG files
in class folders, and a Parquet table of PNG bytes with an integer label. Shared by bench/ and the image tests
(which import bench, never the other way round).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

CLASSES = 10


def digits() -> tuple[np.ndarray, np.ndarray]:
    """The images as uint8 [N, 8, 8] (scikit-learn's 0-16 scaled to 0-255) and their labels."""
    from sklearn.datasets import load_digits

    found = load_digits()
    pixels = np.round(found.images * (255 / 16)).astype(np.uint8)
    return pixels, found.target.astype(np.int64)


def png(pixels: np.ndarray) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels, "L").save(out, format="PNG")
    return out.getvalue()


def write_folder(root: Path, count: int | None = None) -> Path:
    """``root/<digit>/<n>.png``, the layout torchvision's ImageFolder reads."""
    pixels, labels = digits()
    for n, (image, label) in enumerate(zip(pixels[:count], labels[:count], strict=True)):
        folder = root / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{n:04d}.png").write_bytes(png(image))
    return root


def write_parquet(path: Path, count: int | None = None) -> Path:
    """A Parquet file with a binary column ``image`` of PNG bytes and an integer ``label``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pixels, labels = digits()
    table = pa.table(
        {"image": pa.array([png(p) for p in pixels[:count]], pa.binary()), "label": pa.array(labels[:count])}
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path
