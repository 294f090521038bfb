"""Server-side paths: relative to the data root, and never anywhere outside it.

A client names files by paths relative to ``--data-root``. :class:`Sandbox` turns such a path into
an absolute one only when it stays inside the root after every symlink is followed; absolute paths,
``..`` segments, backslashes and percent-encoded dots or separators (a sign of double encoding or
an attack, never of a real file name) are refused before the file system is even consulted.

A check on paths alone races with anyone who can write under the root: a folder swapped for a
symlink after the check would be followed. So files are then opened (:meth:`Sandbox.open`) beneath
the root's descriptor along the checked, symlink-free path with no symlink followed on the way
(``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``, or a walk of ``O_NOFOLLOW`` folder
descriptors where the kernel lacks it): a symlink swapped in since is refused, never followed.

The data root may be a prefix of object storage (``s3://bucket/prefix``): :class:`RemoteSandbox` maps the same
checked paths to keys under the prefix. Object storage has no symlinks and no descriptors, so there the checks on
the text (:func:`checked`, the one home of those rules for both kinds) are the whole rule. :func:`open_sandbox`
picks the kind by the root.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import weakref
from pathlib import Path, PurePosixPath

from noa_core.io.beneath import CHANGED_ERRNOS, open_beneath
from noa_core.io.beneath import FOLDER as _FOLDER
from noa_core.io.remote import RemotePath
from noa_server.problems import ProblemError

_ENCODED = re.compile(r"%(2e|2f|5c|00)", re.IGNORECASE)
MAX_PATH_CHARS = 1024


def _refuse(detail: str, status: int = 403) -> ProblemError:
    return ProblemError(status, "path-refused", "Path refused", detail)


def _encodable(text: str) -> bool:
    """Whether the file system can take ``text`` (lone surrogates cannot be encoded)."""
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def checked(relative: str) -> PurePosixPath:
    """``relative`` as a path below a data root, whatever the root's kind, or a 400/403 problem: 1 to
    :data:`MAX_PATH_CHARS` characters, no encoded dot or separator, NUL, backslash or invalid Unicode, not absolute,
    no ``..``, and not the root itself. What is left names something under the root by text alone."""
    if not relative or len(relative) > MAX_PATH_CHARS:
        raise _refuse(f"a path must have 1 to {MAX_PATH_CHARS} characters", 400)
    if "\x00" in relative or _ENCODED.search(relative) or "\\" in relative or not _encodable(relative):
        raise _refuse(f"{relative!r}: encoded characters, NUL bytes, backslashes and invalid Unicode are not "
                      "allowed in paths")
    pure = PurePosixPath(relative)
    if pure.is_absolute():
        raise _refuse(f"{relative!r}: absolute paths are refused; give a path relative to the data root")
    if ".." in pure.parts:
        raise _refuse(f"{relative!r}: '..' is not allowed in paths")
    if not pure.parts:
        raise _refuse(f"{relative!r} names the data root itself, not a file")
    return pure


class Sandbox:
    """Maps client paths into ``root``; ``hidden`` (the job state directory) is refused too."""

    def __init__(self, root: Path, hidden: Path | None = None, scratch: Path | None = None):
        self.root = root.resolve()
        self.hidden = None if hidden is None else hidden.resolve()
        self.scratch = scratch  # where a request may keep private files (None: the system's temporary folder)
        self._root_fd = os.open(self.root, _FOLDER)
        weakref.finalize(self, os.close, self._root_fd)

    def resolve(self, relative: str) -> Path:
        """The absolute path of ``relative`` inside the root, or a 400/403 problem."""
        resolved = self._follow(checked(relative))
        if not resolved.is_relative_to(self.root):
            raise _refuse(f"{relative!r} resolves outside the data root")
        if resolved == self.root:
            raise _refuse(f"{relative!r} names the data root itself, not a file")
        if self.hidden is not None and resolved.is_relative_to(self.hidden):
            raise _refuse(f"{relative!r} is inside the job state directory")
        return resolved

    def _follow(self, pure: PurePosixPath) -> Path:
        """``root / pure`` with every symlink followed, including one planted in a parent folder.

        The root is already canonical, so only the components below it are inspected (one lstat
        each, where ``Path.resolve`` inspects every component from ``/``); the first symlink hands the
        whole path to ``resolve``. A component that does not exist ends the walk, as in ``resolve``.
        """
        parts = pure.parts
        path = str(self.root)
        for i, part in enumerate(parts):
            path = f"{path}/{part}"
            try:
                mode = os.lstat(path).st_mode
            except OSError:  # missing, or a file used as a folder: nothing below can be a link
                return Path(path, *parts[i + 1:])
            if stat.S_ISLNK(mode):
                try:
                    return (self.root / pure).resolve()
                except RuntimeError:  # what Path.resolve raises for a loop of links
                    raise _refuse(f"{pure.as_posix()!r}: a loop of symbolic links", 400) from None
                except OSError:  # the link was replaced while it was read (EINVAL: no longer a link)
                    raise _refuse(f"{pure.as_posix()!r} changed while it was checked") from None
        return Path(path)

    def open(self, relative: str, flags: int = os.O_RDONLY | os.O_NONBLOCK) -> tuple[int, Path]:
        """A descriptor for the file ``relative`` names (by default for reading; O_NONBLOCK so that a
        FIFO cannot block), and its checked path. See the module documentation."""
        path = self.resolve(relative)
        return self.open_resolved(path, relative, flags), path

    def open_resolved(self, path: Path, relative: str, flags: int = os.O_RDONLY | os.O_NONBLOCK) -> int:
        """:meth:`open` of ``path``, which :meth:`resolve` gave for ``relative`` just before (a request planned to
        run at once): its components are not walked a second time. Opened beneath the root, no link followed, as
        :meth:`open` opens it."""
        try:
            return open_beneath(self._root_fd, path.relative_to(self.root).as_posix(), flags)
        except OSError as exc:
            raise _opening_failed(relative, exc) from None

    def open_folder(self, relative: str) -> tuple[int, Path]:
        """A descriptor for the folder an output named ``relative`` goes in, and the output's checked path."""
        path = self.resolve(relative)
        try:
            return open_beneath(self._root_fd, path.parent.relative_to(self.root).as_posix(), _FOLDER), path
        except OSError as exc:
            folder = PurePosixPath(relative).parent.as_posix()
            raise _opening_failed(relative, exc, f"the folder {folder} does not exist") from None

    def make_folder(self, relative: str) -> None:
        """The folder ``relative`` made beneath the root when missing (its parent must exist)."""
        parent, path = self.open_folder(relative)
        try:
            os.mkdir(path.name, dir_fd=parent)
        except FileExistsError:
            pass
        finally:
            os.close(parent)


def _opening_failed(relative: str, exc: OSError, missing: str = "no such file") -> Exception:
    """The problem for a file that passed the checks but could not be opened: gone (404), or a
    symlink swapped in after the check, or no permission (403). Anything else is the server's."""
    if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG):  # a name over 255 bytes: no such file
        return ProblemError(404, "file-not-found", "File or folder not found", f"{relative}: {missing}")
    if exc.errno in CHANGED_ERRNOS:
        return _refuse(f"{relative!r} changed while it was opened: a symbolic link appeared in it")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return _refuse(f"{relative!r}: permission denied")
    return exc


class RemoteSandbox:
    """Maps client paths to keys under the prefix ``root`` of object storage (``s3://bucket/prefix``) by the rules
    of :func:`checked`: with no symlinks to follow, a checked path is a key under the prefix, compared segment by
    segment (``prefix`` holds ``prefix/x``, never ``prefix-other/x``). Nothing is opened here: noa_core reads and
    writes the keys (:mod:`noa_core.io.remote`)."""

    hidden = None  # the job state lives on this machine (Settings asks for a state directory)

    def __init__(self, root: RemotePath, scratch: Path | None = None):
        self.root = RemotePath(root.url.rstrip("/"))  # s3://bucket/prefix, or s3://bucket for the whole bucket
        self.scratch = scratch

    @property
    def _prefix(self) -> tuple[str, ...]:
        return tuple(part for part in self.root.url.split("://", 1)[1].split("/") if part)

    def resolve(self, relative: str) -> RemotePath:
        """The URL of the key ``relative`` names under the prefix, or a 400/403 problem."""
        if any(c in relative for c in "?#"):  # a URL's query or fragment, where a file name may hold them
            raise _refuse(f"{relative!r}: '?' and '#' are not allowed in paths on object storage", 400)
        pure = checked(relative)
        resolved = self.root.joinpath(*pure.parts)
        segments = tuple(resolved.url.split("://", 1)[1].split("/"))
        if segments[:len(self._prefix)] != self._prefix or len(segments) <= len(self._prefix):
            raise _refuse(f"{relative!r} resolves outside the data root")
        return resolved


AnySandbox = Sandbox | RemoteSandbox  # the data root's, of either kind


def open_sandbox(root: Path, hidden: Path | None = None, scratch: Path | None = None) -> AnySandbox:
    """The sandbox of ``root``: object storage's (:class:`RemoteSandbox`) for a URL, else this machine's."""
    if isinstance(root, RemotePath):
        return RemoteSandbox(root, scratch)
    return Sandbox(root, hidden, scratch)
