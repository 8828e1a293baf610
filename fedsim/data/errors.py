"""Errors raised by the data loaders."""

from __future__ import annotations


class DataNotFound(FileNotFoundError):
    """Dataset files are missing; the message says where we looked and how to get them."""


class DataCorrupted(RuntimeError):
    """Dataset files exist but fail torchvision's checks (e.g. md5) or cannot be parsed."""
