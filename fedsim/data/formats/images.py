"""Encoded images (PNG, JPEG, ...) to arrays, for the table and FedScale readers."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from fedsim.data.formats.errors import DataFormatError

__all__ = ["decode_image", "stack_images"]


def decode_image(data: bytes, where: str | Path, who: str) -> np.ndarray:
    """One encoded image -> ``float32 (C, H, W)`` in [0, 1] (grey ``L`` -> 1 channel, else RGB)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            mode = "L" if img.mode in ("1", "L", "I;16", "I", "F") else "RGB"
            arr = np.asarray(img.convert(mode), dtype=np.float32) / 255.0
    except UnidentifiedImageError:
        raise DataFormatError(where, f"{who}: image does not decode (not a known image format)") from None
    except (OSError, ValueError, SyntaxError) as err:
        raise DataFormatError(where, f"{who}: image does not decode ({err})") from None
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)


def stack_images(images: list[np.ndarray], where: str | Path, who: str) -> np.ndarray:
    """Images of one client -> ``float32 (n, C, H, W)``; every image must have the same shape."""
    shapes = {im.shape for im in images}
    if len(shapes) > 1:
        a, b = sorted(shapes)[:2]
        raise DataFormatError(where, f"{who}: images differ in shape ({a} and {b})")
    return np.stack(images).astype(np.float32, copy=False)
