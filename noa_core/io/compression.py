"""Compressed input streams: which compression a file uses, and its decompressed content."""

from __future__ import annotations

import bz2
import gzip
from pathlib import Path
from typing import BinaryIO

EXTENSIONS = {".gz": "gzip", ".bz2": "bzip2"}


def compression_of(head: bytes) -> str | None:
    """'gzip', 'bzip2' or None, from the first bytes."""
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"BZh"):
        return "bzip2"
    return None


def open_stream(path: Path, compression: str | None) -> BinaryIO:
    """A binary stream of the (decompressed) file content."""
    if compression == "gzip":
        return gzip.open(path, "rb")
    if compression == "bzip2":
        return bz2.open(path, "rb")
    return open(path, "rb")
