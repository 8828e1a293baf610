"""Compressors a scenario names: ``algorithm.compression: {name: NAME, ...}`` (the clients'
uploads) and ``algorithm.downlink_compression`` (the server's broadcast).

One module per compressor holds all of it: the compressor (a frozen :class:`Compressor`: its
payload from the parameter count, its batched transform) and the section a scenario writes (a
subclass of :class:`CompressionSection`, its keys checked by pydantic). A compressor enters through
``fedsim.registries.COMPRESSORS`` as fedsim's own do (``none``, ``topk``, ``randk``, ``qsgd``,
``sign``, ``fp16``), from Python (``fedsim.register_compressor``), a plug-in or ``--plugin``.
:mod:`fedsim.compression.apply` is what the engine and the clock call: a cohort's updates with
error feedback, the broadcast model, the bytes of each transfer. docs/compression.md has the
equations and bytes; docs/extending.md shows a compressor of one's own.
"""

from .base import Compression, Compressor
from .section import CompressionSection

__all__ = ["Compressor", "Compression", "CompressionSection"]
