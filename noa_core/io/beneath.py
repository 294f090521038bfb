"""Files opened beneath a folder, following no symbolic link on the way: the service's data root
(:mod:`noa_server.sandbox`; on a Dask worker, :func:`confined`) and the files of an OME-Zarr store
(:mod:`noa_core.io.omezarr`).

``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` where the kernel has it (Linux 5.6+), else a
walk of ``O_NOFOLLOW`` folder descriptors: a symbolic link met on the way is refused, never followed.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import errno
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from noa_core.errors import PathRefusedError


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_SYS_OPENAT2 = 437  # Linux 5.6+, one number on every architecture (the shared table from 424 on)
_RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x04, 0x08
_OPENAT2_RETRIES = 8  # EAGAIN: a rename raced with the lookup; the kernel asks for another try
# What open_beneath raises for a path that changed under it: a link met (ELOOP), a folder moved out from under the
# lookup (EXDEV), renames racing with openat2 past its retries (EAGAIN)
CHANGED_ERRNOS = (errno.ELOOP, errno.EXDEV, errno.EAGAIN)
FOLDER = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
_openat2_usable = _libc is not None  # until the kernel (or a seccomp filter) says otherwise


def _openat2(dir_fd: int, relative: str, flags: int) -> int:
    assert _libc is not None  # called only where _openat2_usable
    how = _OpenHow(flags | os.O_CLOEXEC, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS)
    for _ in range(_OPENAT2_RETRIES):
        fd = _libc.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_long(dir_fd), ctypes.c_char_p(os.fsencode(relative)),
                           ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code != errno.EAGAIN:
            break
    raise OSError(code, os.strerror(code), relative)


def _walk(dir_fd: int, relative: str, flags: int) -> int:
    """What :func:`_openat2` does, one component at a time, each opened with O_NOFOLLOW."""
    *folders, name = relative.split("/")
    fd = dir_fd
    try:
        for i, folder in enumerate(folders):
            try:
                inner = os.open(folder, FOLDER, dir_fd=fd)
            except NotADirectoryError:  # what O_DIRECTORY | O_NOFOLLOW gives for a link too: say which
                if stat.S_ISLNK(os.stat(folder, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), "/".join(folders[:i + 1])) from None
                raise
            if fd != dir_fd:
                os.close(fd)
            fd = inner
        try:
            return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except NotADirectoryError:  # a folder asked for (O_DIRECTORY) and a link found: say so, as openat2 does
            if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), relative) from None
            raise
    finally:
        if fd != dir_fd:
            os.close(fd)


def open_beneath(dir_fd: int, relative: str, flags: int) -> int:
    """Open ``relative`` (no ``..``, no empty or ``.`` components) beneath the folder ``dir_fd``
    following no symlink at all; OSError ELOOP where one is met (ENOTDIR where a file stands for a folder)."""
    global _openat2_usable
    if _openat2_usable:
        try:
            return _openat2(dir_fd, relative, flags)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OSError(exc.errno, exc.strerror, _first_link(dir_fd, relative)) from None
            if exc.errno not in (errno.ENOSYS, errno.EPERM):  # EPERM: a seccomp filter that does not know it
                raise
            _openat2_usable = False
    return _walk(dir_fd, relative, flags)


def _first_link(dir_fd: int, relative: str) -> str:
    """The leading part of ``relative`` that is a symbolic link (the earlier parts are not: looked at in
    order, none is followed), or ``relative`` where none is any more."""
    parts = relative.split("/")
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        try:
            if stat.S_ISLNK(os.stat(prefix, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                return prefix
        except OSError:
            break
    return relative


# The folder (and its descriptor) beneath which files are opened by path now: see confined
_CONFINING: contextvars.ContextVar[tuple[Path, int] | None] = contextvars.ContextVar("noa_confining", default=None)


@contextlib.contextmanager
def confined(root: str | os.PathLike | None) -> Iterator[None]:
    """Within the block (this thread or task, and the threads noa starts for its work), the files noa opens by path
    (:func:`open_path`: inputs, stores, the temporary file tiles are written into) are opened beneath the folder
    ``root``, following no symbolic link: a service's Dask worker, given the absolute paths its service checked,
    refuses a link planted in one since, where it would follow it out of the data root. None: nothing changes."""
    if root is None:
        yield
        return
    root = Path(root)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    token = _CONFINING.set((root, fd))
    try:
        yield
    finally:
        _CONFINING.reset(token)
        os.close(fd)


def open_path(path: str | os.PathLike, flags: int) -> int:
    """``os.open(path, flags)``; within :func:`confined`, ``path`` (absolute, beneath the root) opened beneath the
    root with no link followed: PathRefusedError for a path outside it or through a link (OSError as ``os.open``
    raises it otherwise: a missing file, a folder)."""
    confining = _CONFINING.get()
    if confining is None:
        return os.open(path, flags)
    root, root_fd = confining
    pure = PurePosixPath(os.fspath(path))
    if not pure.is_relative_to(root) or ".." in pure.parts or pure == PurePosixPath(root):
        raise PathRefusedError(f"{path}: outside the data root, and this work opens files beneath it only")
    try:
        return open_beneath(root_fd, pure.relative_to(root).as_posix(), flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathRefusedError(f"{path}: changed since it was checked: a symbolic link appeared in it "
                                   f"({exc.filename}), which is not followed beneath the data root") from None
        if exc.errno in CHANGED_ERRNOS:
            raise PathRefusedError(f"{path}: changed while it was opened (a folder in it was moved), so it is "
                                   "refused") from None
        raise OSError(exc.errno, exc.strerror, os.fspath(path)) from None


def folder_path(path: Path) -> tuple[Path, int | None]:
    """``path``, a local folder whose files a library writes by their paths (a store's chunks), opened (beneath the
    root within :func:`confined`) and named by its descriptor, ``/proc/self/fd/N``: its files are reached through the
    folder opened, whatever is put at its path since; and N, for the caller to close. Where there is no
    ``/proc/self/fd`` (not Linux), ``path`` and None outside :func:`confined`."""
    if _CONFINING.get() is None and not os.path.isdir("/proc/self/fd"):
        return path, None
    fd = open_path(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    return Path(f"/proc/self/fd/{fd}"), fd
