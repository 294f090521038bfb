"""Server-side paths: relative to the data root, and never anywhere outside it.

A client names files by paths relative to ``--data-root``. :class:`Sandbox` turns such a path into
an absolute one only when it stays inside the root after every symlink is followed; absolute paths,
``..`` segments, backslashes and percent-encoded dots or separators (a sign of double encoding or
an attack, never of a real file name) are refused before the file system is even consulted.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path, PurePosixPath

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


class Sandbox:
    """Maps client paths into ``root``; ``hidden`` (the job state directory) is refused too."""

    def __init__(self, root: Path, hidden: Path | None = None):
        self.root = root.resolve()
        self.hidden = None if hidden is None else hidden.resolve()

    def resolve(self, relative: str) -> Path:
        """The absolute path of ``relative`` inside the root, or a 400/403 problem."""
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
        resolved = self._follow(pure)
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
        return Path(path)

    def relative(self, path: Path) -> str:
        """How a client names ``path`` (never the server's absolute layout)."""
        return path.relative_to(self.root).as_posix()
