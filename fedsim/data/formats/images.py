"""Encoded images (PNG, JPEG, ...) to arrays, for the table and FedScale readers.

An image's size is read from its header and refused above ``MAX_IMAGE_PIXELS`` before it is
decoded (a 236 KB PNG can declare 9000 x 9000 pixels); Pillow's own decompression-bomb warning
is an error here, never a line on stderr.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal

import numpy as np

from fedsim.data.formats.errors import DataFormatError, short
from fedsim.limits import MAX_DECODED_BYTES, MAX_IMAGE_PIXELS

__all__ = ["ImageTransform", "FEDSCALE_MNIST", "decode_image", "stack_images", "ImageBudget"]


@dataclass(frozen=True)
class ImageTransform:
    """How a decoded image becomes an array (before the engine's normalization).

    Attributes:
        mode: ``"auto"``: grey modes -> 1 channel, anything else -> RGB (3 channels); ``"RGB"``:
            always 3 channels (Pillow's ``convert("RGB")``, as FedScale's readers).
        size: ``(width, height)`` to resize to with Pillow's bilinear filter (torchvision's
            ``Resize`` on a PIL image), or None to keep the stored size.
        mean: Per-channel normalization mean (applied by the engine), or None.
        std: Per-channel normalization std, or None.
    """

    mode: Literal["auto", "RGB"] = "auto"
    size: tuple[int, int] | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None


#: FedScale's transform for FEMNIST (``fedscale/dataloaders/utils_data.py``, ``get_data_transform('mnist')``,
#: after ``femnist.py``'s ``convert('RGB')``): RGB, ``Resize((32, 32))``, ``ToTensor()``,
#: ``Normalize((0.1307,), (0.3081,))`` on each of the three channels. FedScale's
#: ``RandomHorizontalFlip`` (a random augmentation, applied to its test images too) is not applied.
FEDSCALE_MNIST = ImageTransform(mode="RGB", size=(32, 32), mean=(0.1307,) * 3, std=(0.3081,) * 3)


class ImageBudget:
    """Counts the bytes a read decodes to; refuses past ``limit`` before the image is decoded."""

    def __init__(self, where: str | Path, limit: int = MAX_DECODED_BYTES):
        self.where, self.limit, self.used = where, limit, 0

    def take(self, nbytes: int, who: str) -> None:
        self.used += int(nbytes)
        if self.used > self.limit:
            raise DataFormatError(self.where, f"{who}: images decode to more than {self.limit:,} bytes")


def decode_image(data: bytes, where: str | Path, who: str, transform: ImageTransform | None = None,
                 budget: ImageBudget | None = None, *, as_bytes: bool = False) -> np.ndarray:
    """One encoded image -> ``float32 (C, H, W)`` in [0, 1] (``transform``: mode and size), or with
    ``as_bytes`` its 8-bit pixels k, ``uint8 (C, H, W)`` (the float is k / 255 in float32).

    Raises:
        DataFormatError: not an image, more than ``MAX_IMAGE_PIXELS`` pixels, or over ``budget``.
    """
    from PIL import Image, UnidentifiedImageError

    transform = transform or ImageTransform()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as img:
                w, h = img.size
                if w * h > MAX_IMAGE_PIXELS:
                    raise DataFormatError(where, f"{who}: image of {w} x {h} pixels is larger than "
                                                 f"{MAX_IMAGE_PIXELS:,} pixels")
                if transform.mode == "RGB":
                    mode = "RGB"
                else:
                    mode = "L" if img.mode in ("1", "L", "I;16", "I", "F") else "RGB"
                out_w, out_h = transform.size or (w, h)
                if budget is not None:
                    budget.take(out_w * out_h * (1 if mode == "L" else 3) * 4, who)
                img.load()
                # FedScale: convert("RGB") before Resize. An L image made RGB is its band three times,
                # and Pillow resamples every band alike: resizing the one band, then repeating it,
                # gives the same bytes at a third of the work (tests/test_datasets_fedscale.py)
                repeat = mode == "RGB" and img.mode == "L"
                img = img if repeat else img.convert(mode)
                if transform.size is not None:
                    img = img.resize(tuple(transform.size), Image.BILINEAR)
                arr = np.asarray(img, dtype=np.uint8) if as_bytes else np.asarray(img, dtype=np.float32) / 255.0
                if repeat:
                    arr = np.repeat(arr[:, :, None], 3, axis=2)
    except DataFormatError:
        raise
    except UnidentifiedImageError:
        raise DataFormatError(where, f"{who}: image does not decode (not a known image format)") from None
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as err:
        raise DataFormatError(where, f"{who}: image refused ({short(err, 120)})") from None
    except (OSError, ValueError, SyntaxError, MemoryError) as err:
        raise DataFormatError(where, f"{who}: image does not decode ({short(err, 120)})") from None
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)


def stack_images(images: Iterable[np.ndarray], n: int, where: str | Path, who: str, dtype=np.float32) -> np.ndarray:
    """``n`` images of one client -> ``(n, C, H, W)`` of ``dtype``, each copied in as it comes (no
    list of decoded images is held beside the result); every image must have the same shape."""
    out = None
    for i, im in enumerate(images):
        if out is None:
            out = np.empty((n, *im.shape), dtype=dtype)
        elif im.shape != out.shape[1:]:
            a, b = sorted([out.shape[1:], im.shape])
            raise DataFormatError(where, f"{who}: images differ in shape ({a} and {b})")
        out[i] = im
    return out if out is not None else np.zeros((0,), dtype=dtype)
