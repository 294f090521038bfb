"""Atomic outputs: write a temporary file beside the destination, then rename it into place.

A reader never sees a half-written output, an existing file is replaced only when asked, and a
failure removes the temporary file, so nothing is left behind.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from noa_core.errors import MissingFileError, NotAFileError, OutputExistsError

# Whether commits wait for the data to reach the disk (fsync). Scratch outputs that are read back
# at once and deleted (the HTTP service's upload results) skip it: it is most of their latency.
_DURABLE: contextvars.ContextVar[bool] = contextvars.ContextVar("noa_durable_outputs", default=True)


def durable() -> bool:
    """Whether outputs committed now must reach the disk (False inside :func:`scratch_outputs`)."""
    return _DURABLE.get()


@contextlib.contextmanager
def scratch_outputs() -> Iterator[None]:
    """Within this block (this thread or task), outputs are renamed into place without fsync.

    The rename stays atomic for readers; only durability across a power cut is given up.
    """
    token = _DURABLE.set(False)
    try:
        yield
    finally:
        _DURABLE.reset(token)


def check_output(path: str | os.PathLike, overwrite: bool) -> Path:
    """The output path, refused early when it exists (without ``overwrite``) or cannot be created."""
    p = Path(path)
    if p.is_dir():
        raise NotAFileError(f"{p}: path: is a directory; give a file name")
    if p.exists() and not overwrite:
        raise OutputExistsError(f"{p}: path: exists; pass overwrite=True to replace it")
    if not p.parent.is_dir():
        raise MissingFileError(f"{p}: path: the folder {p.parent} does not exist")
    return p


def _current_umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


# Read once: os.umask can only be read by setting it, which races with other threads' file creation.
_UMASK = _current_umask()


class TemporaryOutput:
    """A temporary file in the destination folder, renamed onto ``path`` by :meth:`commit`."""

    def __init__(self, path: Path, overwrite: bool) -> None:
        self.path = path
        self.overwrite = overwrite
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".noa-tmp", dir=path.parent)
        os.close(fd)
        self.temp = Path(name)

    def commit(self) -> None:
        """Make the temporary file durable and give it the final name (refusing to clobber unless asked)."""
        must_sync = durable()
        os.chmod(self.temp, 0o666 & ~_UMASK)  # mkstemp makes 0600; an output is an ordinary file
        if must_sync:
            with open(self.temp, "rb+") as f:
                os.fsync(f.fileno())
        if self.overwrite:
            os.replace(self.temp, self.path)
        else:
            try:
                os.link(self.temp, self.path)  # fails if the path appeared meanwhile: never clobbers
            except FileExistsError:
                self.abort()
                raise OutputExistsError(f"{self.path}: path: was created by someone else while writing") from None
            except OSError:  # no hard links on this file system: a plain rename after a last check
                if self.path.exists():
                    self.abort()
                    raise OutputExistsError(f"{self.path}: path: was created by someone else while writing") from None
                os.replace(self.temp, self.path)
            else:
                os.unlink(self.temp)
        if must_sync:
            _fsync_folder(self.path.parent)

    def abort(self) -> None:
        """Remove the temporary file (idempotent)."""
        try:
            os.unlink(self.temp)
        except FileNotFoundError:
            pass


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # some systems cannot open folders; the rename itself is still atomic
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
