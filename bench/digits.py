"""scikit-learn's digits (1,797 real 8x8 handwritten digits, packaged with it) as teams keep images: PNG files
in class folders, and a Parquet table of PNG bytes with an integer label. Shared by bench/ and the image tests
(which import bench, never the other way round).

The data is bench/data/digits.csv.gz, the file scikit-learn 1.9.1 ships as sklearn/datasets/data/digits.csv.gz
and its load_digits reads (the test set of the UCI ML hand-written digits data set, E. Alpaydin and C. Kaynak,
1998, CC BY 4.0: bench/data/README.md), read as load_digits reads it. scikit-learn itself is not installed: it
needs scipy, and where scipy is installed torchmetrics imports scipy.signal, so every process that imported
Lightning in the test venv spent 2 s more CPU than in a user's (whose core lock has no scipy).
"""

from __future__ import annotations

import gzip
import hashlib
import io
from pathlib import Path

import numpy as np

CLASSES = 10
DIGITS = Path(__file__).with_name("data") / "digits.csv.gz"
# sklearn/datasets/data/digits.csv.gz in scikit-learn 1.9.1's wheel.
DIGITS_SHA256 = "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"


def digits() -> tuple[np.ndarray, np.ndarray]:
    """The images as uint8 [N, 8, 8] (scikit-learn's 0-16 scaled to 0-255) and their labels."""
    packed = DIGITS.read_bytes()
    found = hashlib.sha256(packed).hexdigest()
    if found != DIGITS_SHA256:
        raise ValueError(f"{DIGITS} has sha256 {found}, not scikit-learn's {DIGITS_SHA256}: restore it from git")
    # As sklearn.datasets.load_digits: 64 pixels (0-16) then the digit, one row an image.
    table = np.loadtxt(io.BytesIO(gzip.decompress(packed)), delimiter=",")
    pixels = np.round(table[:, :-1].reshape(-1, 8, 8) * (255 / 16)).astype(np.uint8)
    return pixels, table[:, -1].astype(np.int64)


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
