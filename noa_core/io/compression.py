"""Opening inputs safely, which compression a file uses, and its decompressed content, checked.

Python's gzip and bz2 file objects accept what noa must refuse: they read several members one after
the other, skip trailing bytes, and check the CRC only when a read reaches the end of a member
(which a reader that stops after the data never does). :class:`Decompressed` drives the
decompressor itself over one gzip member or bzip2 stream, so that every problem is a one-line error
naming the file, memory follows what is asked for, and :meth:`Decompressed.finish` checks the end.
"""

from __future__ import annotations

import bz2
import io
import os
import stat
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from noa_core.errors import (
    CorruptFileError,
    EmptyFileError,
    FileFormatError,
    MissingFileError,
    NotAFileError,
    PathRefusedError,
    SizeError,
    TruncatedFileError,
)
from noa_core.io import beneath, remote

EXTENSIONS = {".gz": "gzip", ".bz2": "bzip2"}
CHUNK_BYTES = 1 << 20  # compressed bytes read at a time
MAX_BUFFER_BYTES = 8 << 20  # the largest buffer an input is read through
# Deflate cannot expand by more than 1032:1, so a gzip file cannot hold more than this many times its size.
GZIP_MAX_RATIO = 1032
_GZIP_TRAILER_BYTES = 8  # CRC-32, then ISIZE: the content length modulo 2**32
# zlib's words for a bad trailer -> the user's
_ZLIB_REASONS = {"incorrect data check": "CRC check failed", "incorrect length check": "length check failed"}


def compression_of(head: bytes) -> str | None:
    """'gzip', 'bzip2' or None, from the first bytes."""
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"BZh"):
        return "bzip2"
    return None


def open_input(path: Path) -> io.BufferedReader:
    """``path`` opened for reading, refused unless it is a non-empty regular file (a remote input: a file
    reading byte ranges of a non-empty object, :func:`noa_core.io.remote.open_input`).

    The open does not block (O_NONBLOCK, cleared afterwards), so a FIFO or device put in place of a
    checked file cannot hang it; the opened descriptor, not the path, is then checked, so a swap
    after any earlier check cannot slip through.
    """
    url = remote.remote_path(path)
    if url is not None:
        return remote.open_input(url)
    try:
        fd = beneath.open_path(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise MissingFileError(f"{path}: no such file") from None
    except PathRefusedError:
        raise
    except OSError as exc:
        raise FileFormatError(f"{path}: cannot be accessed ({exc.strerror})") from None
    try:
        info = check_descriptor(path, fd)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    # What open() makes of it, without asking whether a regular file is a terminal (a system call each input); its
    # buffer by Python 3.14's rule, whatever the Python: the file system's block, at most 8 MiB (a parallel file
    # system's may be larger)
    return io.BufferedReader(io.FileIO(fd, "rb"), max(min(info.st_blksize, MAX_BUFFER_BYTES), io.DEFAULT_BUFFER_SIZE))


@contextmanager
def opened_input(path: Path, opened: io.BufferedReader | None) -> Iterator[io.BufferedReader]:
    """``opened`` (``path`` as :func:`open_input` opened it for detection) from its start, left open for its owner;
    without one, ``path`` opened by :func:`open_input` and closed after: an input read once its format is known is
    not opened, checked and buffered twice."""
    if opened is None:
        with open_input(path) as file:
            yield file
    else:
        opened.seek(0)
        yield opened


def size_of(file: BinaryIO) -> int:
    """The size in bytes of a file :func:`open_input` opened."""
    size = getattr(file, "size", None)  # a remote object's, known from its listing
    return size if isinstance(size, int) else os.fstat(file.fileno()).st_size


def check_descriptor(path: Path, fd: int) -> os.stat_result:
    """Refuse an open descriptor that is not a non-empty regular file (``path`` names it in messages); its status."""
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        raise NotAFileError(f"{path}: is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise NotAFileError(f"{path}: is not a regular file")
    if info.st_size == 0:
        raise EmptyFileError(f"{path}: size: the file is empty (0 bytes)")
    return info


def _reason(exc: Exception) -> str:
    """What is wrong with a stream, in words, from the decompressor's error."""
    text = str(exc).rsplit(": ", 1)[-1]
    return _ZLIB_REASONS.get(text, text.lower() or "cannot be decompressed")


class Decompressed:
    """The content of one gzip member or bzip2 stream in an open file, read forward.

    Attributes:
        path: the file, for messages.
        kind: 'gzip' or 'bzip2'.
    """

    def __init__(self, path: Path, kind: str, file: BinaryIO) -> None:
        self.path, self.kind = path, kind
        self._file = file
        self._decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS) if kind == "gzip" else bz2.BZ2Decompressor()
        self._exhausted = False  # the whole file was handed to the decompressor

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes; fewer only where the stream ends."""
        out = bytearray()
        while len(out) < size:
            chunk = self._next(size - len(out))
            if not chunk:
                break
            out += chunk
        return bytes(out)

    def check_size(self, declared: int, fields: str) -> None:
        """Refuse a content of ``declared`` bytes (as ``fields`` of the header say) that the file cannot hold,
        before anything that size is made: a gzip file holds at most 1032 times its size, and its
        trailer records the content length (modulo 2**32)."""
        if self.kind != "gzip":
            return  # bzip2 records no length and expands without practical bound
        size = os.fstat(self._file.fileno()).st_size
        if declared > size * GZIP_MAX_RATIO:
            raise SizeError(f"{self.path}: {fields}: the header declares {declared} bytes, more than a "
                            f"{size}-byte gzip file can hold")
        trailer = os.pread(self._file.fileno(), _GZIP_TRAILER_BYTES, max(size - _GZIP_TRAILER_BYTES, 0))
        recorded = int.from_bytes(trailer[4:], "little")
        if len(trailer) < _GZIP_TRAILER_BYTES or recorded != declared % (1 << 32):
            raise TruncatedFileError(f"{self.path}: gzip stream: the header promises {declared} bytes of header "
                                     f"and data, the gzip trailer records {recorded} (modulo 2**32): truncated, "
                                     "damaged, or several members")

    def finish(self, declared: int) -> None:
        """Check the end once the ``declared`` bytes were read: the stream ends there, its CRC and length are
        right (the decompressor checks them on reaching the end) and nothing follows it in the file."""
        if self._next(1):
            raise SizeError(f"{self.path}: {self.kind} stream: holds more than the {declared} bytes the header "
                            "declares")
        if self._decompressor.unused_data or self._file.read(1):
            raise CorruptFileError(f"{self.path}: {self.kind} stream: bytes follow the end of the compressed "
                                   "data (several members or trailing garbage); noa reads one")

    def _feed(self) -> bytes:
        """The compressed bytes to give the decompressor next; empty once the file is exhausted."""
        d = self._decompressor
        tail = b"" if isinstance(d, bz2.BZ2Decompressor) else d.unconsumed_tail  # zlib's (gzip)
        if tail or (isinstance(d, bz2.BZ2Decompressor) and not d.needs_input):
            return tail
        data = self._file.read(CHUNK_BYTES)
        self._exhausted = not data
        return data

    def _next(self, limit: int) -> bytes:
        """At most ``limit`` more bytes of content; empty at the end of the stream."""
        while not self._decompressor.eof:
            data = self._feed()
            try:
                out = self._decompressor.decompress(data, limit)
            except (zlib.error, OSError, EOFError, ValueError) as exc:
                raise CorruptFileError(f"{self.path}: {self.kind} stream: damaged ({_reason(exc)})") from None
            if out:
                return out
            if not data and self._exhausted:
                raise TruncatedFileError(f"{self.path}: {self.kind} stream: ends before the end of the data "
                                         "(truncated)")
        return b""
