"""Images decoded once, by the data stage, into the uint8 tensors a partition stores.

An image column holds encoded bytes (PNG, JPEG, WebP, ...: a binary column, or Spark's ``binaryFile``
``content``) or the struct of Spark's ``image`` data source (origin, height, width, nChannels, mode, data:
pixels already decoded, in OpenCV's BGR order). Either way the image is converted to ``data.image.channels``,
resized so that it covers ``data.image.size`` and centre-cropped to it (torchvision's Resize then CenterCrop,
with Pillow's bilinear filter), and returned as a [channels, height, width] uint8 array: training reads no
codec, and the same Pillow gives the same bytes on every machine.

Refused before any pixel is decoded: more encoded bytes than ``max_bytes``, more pixels than ``max_pixels`` or
Pillow's ``Image.MAX_IMAGE_PIXELS`` (its decompression-bomb limit, whose warning is made an error here), a
mode with no 8-bit conversion (16-bit, 32-bit, float). A damaged or truncated file is refused by Pillow's
decoder (``ImageFile.LOAD_TRUNCATED_IMAGES`` stays off). Each refusal is an ``ImageRefused`` that the caller
names with the file or row.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from snakeddp.errors import TableError

# What an image file is, by its name (a folder of class folders: snakeddp.data.imagefolder).
EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff")
# Modes converted to L or RGB without losing what they mean: 8 bits per channel, or palettes of them.
MODES = ("1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr", "LAB", "HSV")
# OpenCV's type codes in Spark's image struct: 8-bit unsigned with 1, 3 or 4 channels (BGR, BGRA).
SPARK_MODES = {0: 1, 16: 3, 24: 4}
SPARK_FIELDS = ("origin", "height", "width", "nChannels", "mode", "data")


class ImageRefused(ValueError):
    """An image that is not decoded: why, in a few words, for the caller to name its file or row."""


@dataclass(frozen=True)
class ImageSpec:
    """``data.image``: what every image becomes."""

    size: tuple[int, int] | None
    channels: int
    max_pixels: int
    max_bytes: int

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> ImageSpec:
        size = section.get("size")
        return cls(
            size=(int(size[0]), int(size[1])) if size else None,
            channels=int(section.get("channels", 3)),
            max_pixels=int(section.get("max_pixels", 40_000_000)),
            max_bytes=int(section.get("max_bytes", 64 << 20)),
        )


def _pillow() -> Any:
    from PIL import Image, ImageFile

    # Never decode what a truncated file lacks as grey pixels: refuse the file.
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    return Image


def _check_pixels(width: int, height: int, spec: ImageSpec, pillow_limit: int | None) -> None:
    pixels = width * height
    limits = [spec.max_pixels, *([pillow_limit] if pillow_limit else [])]
    if pixels > min(limits):
        raise ImageRefused(
            f"{width}x{height} is {pixels:,} pixels, over the limit of {min(limits):,} (a decompression bomb, "
            "or a bigger image than expected)"
        )


def decode(data: bytes | memoryview, spec: ImageSpec) -> np.ndarray:
    """Encoded bytes as a [channels, H, W] uint8 array, or ImageRefused."""
    if len(data) > spec.max_bytes:
        raise ImageRefused(f"{len(data):,} bytes, over data.image.max_bytes ({spec.max_bytes:,})")
    image_module = _pillow()
    with warnings.catch_warnings():
        # Pillow warns past MAX_IMAGE_PIXELS and raises only past twice that: both are refusals here.
        warnings.simplefilter("error", image_module.DecompressionBombWarning)
        try:
            image = image_module.open(io.BytesIO(data))
            _check_pixels(image.width, image.height, spec, image_module.MAX_IMAGE_PIXELS)
            if image.mode not in MODES:
                raise ImageRefused(
                    f"mode {image.mode} has no 8-bit conversion (16-bit, 32-bit or float pixels); save it as 8-bit"
                )
            image.load()
        except ImageRefused:
            raise
        except (image_module.DecompressionBombWarning, image_module.DecompressionBombError) as error:
            raise ImageRefused(f"a decompression bomb ({error})") from None
        except Exception as error:  # Pillow raises UnidentifiedImageError, OSError, SyntaxError, ValueError...
            why = " ".join(str(error).split())[:200] or type(error).__name__
            raise ImageRefused(f"not a decodable image ({type(error).__name__}: {why})") from None
    return _fit(image.convert("L" if spec.channels == 1 else "RGB"), spec)


def from_spark(row: Mapping[str, Any], spec: ImageSpec) -> np.ndarray:
    """A row of Spark's image struct (pixels in BGR(A) order, row-major) as a [channels, H, W] uint8 array."""
    if row.get("data") is None:
        raise ImageRefused("Spark could not read the image (its struct has no data: an invalid image)")
    height, width, channels, mode = (int(row[k] or 0) for k in ("height", "width", "nChannels", "mode"))
    if SPARK_MODES.get(mode) != channels:
        raise ImageRefused(
            f"Spark image mode {mode} with {channels} channels is not 8-bit (OpenCV's CV_8UC1, CV_8UC3 or CV_8UC4)"
        )
    _check_pixels(width, height, spec, None)
    pixels = np.frombuffer(row["data"], dtype=np.uint8)
    if pixels.size != height * width * channels:
        raise ImageRefused(f"{pixels.size} bytes of pixels for {height}x{width}x{channels} (a truncated image)")
    image_module = _pillow()
    pixels = pixels.reshape(height, width, channels)
    if channels == 1:
        image = image_module.fromarray(pixels[:, :, 0], "L")
    else:  # BGR(A) -> RGB; alpha dropped, as Pillow's own RGBA -> RGB does
        image = image_module.fromarray(np.ascontiguousarray(pixels[:, :, 2::-1]), "RGB")
    return _fit(image.convert("L" if spec.channels == 1 else "RGB"), spec)


def _fit(image: Any, spec: ImageSpec) -> np.ndarray:
    """Resize to cover ``spec.size`` keeping the aspect ratio, centre-crop to it; [C, H, W] uint8."""
    if spec.size is not None and (image.height, image.width) != spec.size:
        height, width = spec.size
        scale = max(height / image.height, width / image.width)
        covered = (max(width, round(image.width * scale)), max(height, round(image.height * scale)))
        image = image.resize(covered, resample=_bilinear())
        left, top = (covered[0] - width) // 2, (covered[1] - height) // 2
        image = image.crop((left, top, left + width, top + height))
    pixels = np.asarray(image, dtype=np.uint8)
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    return np.ascontiguousarray(pixels.transpose(2, 0, 1))


def _bilinear() -> Any:
    return _pillow().Resampling.BILINEAR


def is_spark_image(field_names: Sequence[str]) -> bool:
    """Whether a struct with these fields is Spark's image data source's."""
    return set(SPARK_FIELDS) <= set(field_names)


def refused(where: str, why: ImageRefused) -> TableError:
    """One line naming the image's file or row, with what to do."""
    return TableError(
        f"{where}: image refused: {why}. HINT: fix or remove the image, raise data.image.max_pixels / max_bytes if "
        "it is a genuine large image, or set data.table.nan_policy: drop to skip (and count) such images."
    )
