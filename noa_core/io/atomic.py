"""Atomic outputs: write a temporary file beside the destination, then rename it into place.

Outputs that are directories (OME-Zarr stores) are built in a temporary directory beside the
destination (:meth:`TemporaryOutput.make_directory`), renamed into place the same way; replacing an
existing store swaps the two atomically (``renameat2`` RENAME_EXCHANGE where the system has it).

A reader never sees a half-written output, an existing file is replaced only when asked, and a
failure removes the temporary file, so nothing is left behind. An output on object storage
(:class:`RemoteOutput`) is written the same way in this machine's temporary folder, then uploaded as one
object (a store is written into the bucket itself: :mod:`noa_core.io.remote`). A writer killed outright (SIGKILL,
a lost cluster node) cannot clean up: its temporary file holds no lock any more, and a later
process writing the same output (a rerun with --resume, say) removes it.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import ctypes
import errno
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from noa_core.errors import MissingFileError, NoSpaceError, NotAFileError, OutputExistsError, param
from noa_core.io import libc, remote

try:
    import fcntl
except ImportError:  # Windows has none: abandoned temporary files are then left alone
    fcntl = None  # type: ignore[assignment]  # a module, or None where there is none

# Whether commits wait for the data to reach the disk (fsync). Scratch outputs that are read back
# at once and deleted (the HTTP service's upload results) skip it: it is most of their latency.
_DURABLE: contextvars.ContextVar[bool] = contextvars.ContextVar("noa_durable_outputs", default=True)


# The outputs this process has given their final names, in order. A command whose outputs are all placed has
# succeeded, whatever interrupts it afterwards: noa_cli's SIGTERM handling asks (noa_cli.report).
PLACED: list[Path] = []


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


def check_output(path: str | os.PathLike, overwrite: bool, directory: bool = False) -> Path:
    """The output path, refused early when it exists (without ``overwrite``) or cannot be created.

    ``directory``: the output is a store (a directory); an existing one is replaced only when it is a
    zarr store itself, never any other folder.
    """
    url = remote.remote_path(path)
    if url is not None:
        return remote.check_output(url, overwrite, directory)
    p = Path(path)
    if p.is_dir() and not directory:
        raise NotAFileError(f"{p}: is a directory; give a file name")
    if directory and p.is_dir() and overwrite and not _is_zarr_store(p):
        raise NotAFileError(f"{p}: is a directory that is not a zarr store; noa replaces only stores")
    if p.exists() and not overwrite:
        raise OutputExistsError(f"{p}: exists; give {param('overwrite')} to replace it")
    if not p.parent.is_dir():
        raise MissingFileError(f"{p}: the folder {p.parent} does not exist")
    return p


def _current_umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


# Read once: os.umask can only be read by setting it, which races with other threads' file creation.
_UMASK = _current_umask()


# A temporary file younger than this may belong to a writer that has created it but not yet
# locked it; only older unlocked ones are taken for abandoned.
ABANDONED_AFTER_S = 60.0
TEMP_SUFFIX = ".noa-tmp"


def _try_lock(fd: int) -> bool | None:
    """Take an exclusive lock on ``fd`` without waiting: True, False (someone holds it), or None
    where the file system cannot lock."""
    if fcntl is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return None
    return True


def _is_zarr_store(path: Path) -> bool:
    return any((path / name).is_file() for name in ("zarr.json", ".zgroup", ".zattrs", ".zarray"))


def _remove_if_abandoned(temp: Path, now: float) -> bool:
    """Remove ``temp`` (a file, or a store's directory) if it is older than :data:`ABANDONED_AFTER_S` and
    nobody holds it locked."""
    try:
        fd = os.open(temp, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        if now - os.fstat(fd).st_mtime > ABANDONED_AFTER_S and _try_lock(fd):
            if os.path.isdir(temp):
                shutil.rmtree(temp)
            else:
                os.unlink(temp)
            return True
    except OSError:
        pass
    finally:
        os.close(fd)
    return False


def _temporaries(folder: Path) -> dict[str, list[str]]:
    """The names of the temporary files in ``folder``, by the output name they were for."""
    found: dict[str, list[str]] = {}
    with os.scandir(folder) as entries:
        for entry in entries:
            name = entry.name
            if name.startswith(".") and name.endswith(TEMP_SUFFIX):
                output = name[1:-len(TEMP_SUFFIX)].rsplit(".", 1)[0]  # ".{output}.{random}.noa-tmp"
                found.setdefault(output, []).append(name)
    return found


def remove_abandoned(path: Path) -> list[Path]:
    """Remove the temporary files of writers of ``path`` that died before finishing: those older
    than :data:`ABANDONED_AFTER_S` that nobody holds locked. Returns what was removed."""
    now = time.time()
    temps = (path.parent / name for name in _temporaries(path.parent).get(path.name, []))
    return [t for t in temps if _remove_if_abandoned(t, now)]


# Folders this process has listed for temporary files, with what it found not yet looked at. Each
# folder is listed once: a batch writing thousands of files into one folder must not list it for
# every file (7 ms per listing of 10,000 entries). Temporary files that appear later are removed
# by a later process (a rerun with --resume, say). Folders are known by device and inode, not by path:
# the service names them /proc/self/fd/N/, and descriptor numbers are reused. (A folder removed and another
# made with its inode number is taken for it: the new one's leftovers wait for a later process too.)
_LISTED: collections.OrderedDict[tuple[int, int], dict[str, list[str]]] = collections.OrderedDict()
_LISTED_MAX = 1024
_LISTED_LOCK = threading.Lock()


def _remove_leftovers(path: Path) -> None:
    folder = path.parent.absolute()
    try:
        info = os.stat(folder)
    except OSError:
        return
    identity = (info.st_dev, info.st_ino)
    with _LISTED_LOCK:
        found = _LISTED.get(identity)
        if found is None:
            try:
                found = _temporaries(folder)
            except OSError:
                return
            _LISTED[identity] = found
            if len(_LISTED) > _LISTED_MAX:
                _LISTED.popitem(last=False)
        candidates = found.pop(path.name, [])
    now = time.time()
    for name in candidates:
        _remove_if_abandoned(folder / name, now)


class TemporaryOutput:
    """A temporary file in the destination folder, renamed onto ``path`` by :meth:`commit`.

    The file stays locked (flock) while it exists, which tells a live writer from a dead one. An output on object
    storage is a :class:`RemoteOutput` instead.
    """

    def __new__(cls, path: Path, overwrite: bool) -> TemporaryOutput:
        return super().__new__(RemoteOutput if cls is TemporaryOutput and remote.is_remote(path) else cls)

    def __init__(self, path: Path, overwrite: bool) -> None:
        self.path = path
        self.overwrite = overwrite
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
        self._lock_fd: int | None = fd
        _try_lock(fd)
        self.temp = Path(name)
        self.directory: Path | None = None  # the store being built, for directory outputs
        self._directory_fd: int | None = None
        self._placing: tuple[int, int] | None = None  # while committing: the identity that takes the name
        _remove_leftovers(path)

    def make_directory(self) -> Path:
        """An empty, locked temporary directory beside the destination, which :meth:`commit` renames
        onto ``path`` instead of the temporary file (which then only held the data being converted).

        Named like the temporary file with '-d' before the suffix, so that leftovers are found by the
        output's name and removed as abandoned files are."""
        if self.directory is None:
            directory = self.temp.with_name(self.temp.name[:-len(TEMP_SUFFIX)] + "-d" + TEMP_SUFFIX)
            os.mkdir(directory)
            self.directory = directory
            self._directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            _try_lock(self._directory_fd)
        return self.directory

    def identity(self) -> tuple[int, int] | None:
        """(device, inode) of the temporary store, else file, as this writer holds it open (None: not held, as an
        object storage store): what a process given its path checks it opened (:class:`noa_core.io.stream.Region`)."""
        fd = self._directory_fd if self.directory is not None else self._lock_fd
        return None if fd is None else held_identity(fd)

    def disown(self) -> None:
        """Nothing to give up: the temporary directory is this writer's own (a store on object storage is written
        at its name: :meth:`RemoteOutput.disown`)."""

    def commit(self) -> None:
        """Make the temporary file durable and give it the final name (refusing to clobber unless asked)."""
        self._placing = _identity(self.directory if self.directory is not None else self.temp)
        if self.directory is not None:
            self._commit_directory()
        else:
            self._commit_file()
        PLACED.append(self.path)
        self._placing = None

    def _commit_file(self) -> None:
        must_sync = durable()
        os.chmod(self.temp, 0o666 & ~_UMASK)  # mkstemp makes 0600; an output is an ordinary file
        if must_sync:
            with open(self.temp, "rb+") as f:
                sync(f.fileno(), self.path)
        if self.overwrite:
            os.replace(self.temp, self.path)
        else:
            try:
                os.link(self.temp, self.path)  # fails if the path appeared meanwhile: never clobbers
            except FileExistsError:
                self.abort()
                raise OutputExistsError(f"{self.path}: was created by someone else while writing") from None
            except OSError:  # no hard links on this file system: a plain rename after a last check
                if self.path.exists():
                    self.abort()
                    raise OutputExistsError(f"{self.path}: was created by someone else while writing") from None
                os.replace(self.temp, self.path)
            else:
                os.unlink(self.temp)
        self._unlock()
        if must_sync:
            fsync_folder(self.path.parent)

    def _commit_directory(self) -> None:
        """Rename the store's directory onto ``path``: onto a missing path without clobbering anything
        that appears meanwhile; onto an existing one (``overwrite``) by an atomic exchange where the
        system has one, else by moving the old one aside first (restored if the rename fails)."""
        assert self.directory is not None
        must_sync = durable()
        if must_sync:
            _fsync_tree(self.directory, self.path)
        try:
            if not os.path.lexists(self.path):
                if not _rename(self.directory, self.path, _RENAME_NOREPLACE):
                    if os.path.lexists(self.path):
                        raise FileExistsError
                    os.rename(self.directory, self.path)
            elif not self.overwrite:
                raise FileExistsError
            else:
                self._replace_existing()
        except FileExistsError:
            self.abort()
            raise OutputExistsError(f"{self.path}: was created by someone else while writing") from None
        self.directory = None
        self._remove_temporaries()  # the data file: converted into the store, no longer needed
        if must_sync:
            fsync_folder(self.path.parent)

    def _replace_existing(self) -> None:
        """Put the new store at ``path`` and remove what was there (a store or a file)."""
        assert self.directory is not None
        old = self.temp.with_name(self.temp.name[:-len(TEMP_SUFFIX)] + "-old" + TEMP_SUFFIX)
        if _rename(self.directory, self.path, _RENAME_EXCHANGE):
            os.rename(self.directory, old)  # the old output now sits where the new store was built
        else:
            os.rename(self.path, old)
            try:
                os.rename(self.directory, self.path)
            except BaseException:
                os.rename(old, self.path)
                raise
        if os.path.isdir(old) and not os.path.islink(old):
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.unlink(old)

    def abort(self) -> None:
        """Remove the temporary file, and the temporary directory of a store (idempotent). A commit that an
        exception (a signal) cut short after the output took its name counts as placed."""
        if self._placing is not None:
            if os.path.lexists(self.path) and _identity(self.path) == self._placing:
                PLACED.append(self.path)
            self._placing = None
        self._remove_temporaries()

    def _remove_temporaries(self) -> None:
        """Remove the temporary file and store where their names still hold them: another file or folder put at
        either name since (by a rename in its folder) is someone else's, and left alone."""
        if _holds(self._lock_fd, self.temp):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.temp)
        if self.directory is not None:
            if _holds(self._directory_fd, self.directory):
                shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
        self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._directory_fd is not None and self.directory is None:
            os.close(self._directory_fd)
            self._directory_fd = None


class RemoteOutput(TemporaryOutput):
    """An output on object storage (``path``, a URL), which has no rename: a file is written into a temporary file
    of this machine's temporary folder (``TMPDIR``), which :meth:`commit` uploads as one object
    (:func:`noa_core.io.remote.upload`) and removes; a store (:meth:`make_directory`) is written into the bucket
    under its own name, the writer putting its group metadata last, and :meth:`abort` removes its objects."""

    def __init__(self, path: Path, overwrite: bool) -> None:
        url = remote.remote_path(path)
        assert url is not None  # made by TemporaryOutput for URLs alone
        self.path = self.url = url
        self.overwrite = overwrite
        fd, name = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=TEMP_SUFFIX)
        self._lock_fd = fd
        self.temp = Path(name)
        self.directory = None
        self._directory_fd = None
        self._placing = None

    def make_directory(self) -> Path:
        """The store's URL, emptied first when it holds an old store being replaced (object storage cannot swap
        two prefixes: the old store is gone once the new one is begun)."""
        if self.directory is None:
            if self.overwrite:
                remote.remove_tree(self.url)
            self.directory = self.path
        return self.directory

    def disown(self) -> None:
        """The store at the URL is another writer's (it made it first): :meth:`abort` leaves its objects."""
        self.directory = None

    def commit(self) -> None:
        if self.directory is None:
            remote.upload(self.temp, self.url, self.overwrite)
        self.directory = None  # a store is complete once its metadata are written: nothing to remove now
        self._remove_temporaries()
        PLACED.append(self.path)

    def abort(self) -> None:
        self._remove_temporaries()

    def _remove_temporaries(self) -> None:
        if self.directory is not None:
            remote.remove_tree(self.url)
            self.directory = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.temp)
        self._unlock()


class Placement:
    """Finished outputs (files or stores) given their names all together, or not at all.

    ``moves`` pairs each finished temporary with its final name, all in one folder tree on one file
    system. :meth:`place` renames them in order; an output it replaces (``overwrite``) is swapped into
    the temporary's name (RENAME_EXCHANGE, else moved aside beside it), so it can come back. On any
    exception, SIGTERM's included, :meth:`undo` puts back what was there: it tells what has moved from
    the files' identities, not from bookkeeping an exception may have cut short. The replaced outputs
    are gone only when the caller removes the temporaries' folder after a complete placement."""

    def __init__(self, moves: list[tuple[Path, Path]], overwrite: bool) -> None:
        self.moves = moves
        self.overwrite = overwrite
        self._ids = [_identity(temp) for temp, _ in moves]

    def place(self) -> None:
        for temp, path in self.moves:
            if not os.path.lexists(path):
                _rename_new(temp, path)
            elif not self.overwrite:
                raise OutputExistsError(f"{path}: was created by someone else while writing")
            elif not _rename(temp, path, _RENAME_EXCHANGE):
                os.rename(path, _aside(temp))
                os.rename(temp, path)

    def undo(self) -> None:
        for (temp, path), ours in reversed(list(zip(self.moves, self._ids))):
            old = _aside(temp)
            if not os.path.lexists(path) or _identity(path) != ours:  # ours never took the name
                if os.path.lexists(old) and not os.path.lexists(path):
                    os.rename(old, path)
                continue
            if os.path.lexists(temp) and _identity(temp) == ours:  # linked, not yet unlinked
                os.unlink(path)
            elif os.path.lexists(temp):  # the replaced output sits in the temporary's name: swap back
                if not _rename(temp, path, _RENAME_EXCHANGE):
                    os.rename(path, _aside(temp, ".new"))
                    os.rename(temp, path)
            elif os.path.lexists(old):
                os.rename(path, temp)
                os.rename(old, path)
            else:
                _remove(path)


def commit_together(outputs: Sequence[TemporaryOutput]) -> None:
    """Give the temporary files of ``outputs`` (one folder tree, one file system) their final names all together,
    or none of them (a particle file and its stack): each made durable first, then placed in order
    (:class:`Placement`); on any failure, SIGTERM's included, what was placed is taken back, what it replaced
    restored, and the temporaries removed. The outputs replaced are gone once all are placed. Outputs on object
    storage (:class:`RemoteOutput`, all of them) are uploaded in order instead (:func:`remote.upload_together`)."""
    if any(isinstance(out, RemoteOutput) for out in outputs):
        _upload_together(outputs)
        return
    must_sync = durable()
    for out in outputs:
        os.chmod(out.temp, 0o666 & ~_UMASK)
        if must_sync:
            with open(out.temp, "rb+") as f:
                sync(f.fileno(), out.path)
    placement = Placement([(out.temp, out.path) for out in outputs], all(out.overwrite for out in outputs))
    try:
        placement.place()
    except BaseException:
        placement.undo()
        for out in outputs:
            out.abort()
        raise
    for out in outputs:  # each temporary's name now holds the output it replaced, if any
        for leftover in (out.temp, _aside(out.temp)):
            if os.path.lexists(leftover):
                _remove(leftover)
        out._unlock()
        PLACED.append(out.path)
    if must_sync:
        for folder in dict.fromkeys(out.path.parent for out in outputs):
            fsync_folder(folder)


def _upload_together(outputs: Sequence[TemporaryOutput]) -> None:
    """:func:`commit_together` of outputs on object storage: their temporary files uploaded, then removed."""
    remote_outputs = [out for out in outputs if isinstance(out, RemoteOutput)]
    assert len(remote_outputs) == len(outputs)  # one folder: all of them on object storage, or none
    try:
        remote.upload_together([(out.temp, out.url) for out in remote_outputs],
                               all(out.overwrite for out in remote_outputs))
    finally:
        for out in remote_outputs:
            out.abort()  # its temporary file, uploaded or not
    PLACED.extend(out.path for out in remote_outputs)


@contextlib.contextmanager
def folders_made(folders: Iterable[Path]) -> Iterator[None]:
    """Within this block, ``folders`` exist: those missing are made (each in a folder that exists), and removed
    again, once empty, when the block fails (outputs that were to go in them, placed together or not at all, leave
    no folder behind)."""
    made: list[Path] = []
    try:
        for folder in dict.fromkeys(folders):
            try:
                os.mkdir(folder)
                made.append(folder)
            except FileExistsError:
                if not os.path.isdir(folder):
                    raise NotAFileError(f"{folder}: is not a folder") from None
        yield
    except BaseException:
        for folder in reversed(made):
            with contextlib.suppress(OSError):  # not empty: something else was put there meanwhile
                os.rmdir(folder)
        raise


def _holds(fd: int | None, path: Path) -> bool:
    """Whether ``path`` names the file or folder open as ``fd`` (None: closed, so nothing of it is left to remove)."""
    if fd is None:
        return False
    try:
        return _identity(path) == held_identity(fd)
    except FileNotFoundError:
        return False


def _identity(path: Path) -> tuple[int, int]:
    info = os.lstat(path)
    return info.st_dev, info.st_ino


def held_identity(fd: int) -> tuple[int, int]:
    """(device, inode) of the file or folder open as ``fd``: what a path naming it since must still give."""
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _aside(temp: Path, suffix: str = ".old") -> Path:
    return temp.with_name(temp.name + suffix)


def _remove(path: Path) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _rename_new(temp: Path, path: Path) -> None:
    """``temp`` renamed to the missing ``path``, never over anything that appears there meanwhile."""
    try:
        if _rename(temp, path, _RENAME_NOREPLACE):
            return
        os.link(temp, path)  # fails if the path exists (files only)
    except FileExistsError:
        raise OutputExistsError(f"{path}: was created by someone else while writing") from None
    except OSError:  # a folder, or no hard links on this file system: a plain rename after a last check
        if os.path.lexists(path):
            raise OutputExistsError(f"{path}: was created by someone else while writing") from None
        os.rename(temp, path)
    else:
        os.unlink(temp)


_RENAME_NOREPLACE = 1  # renameat2 flags (linux/fs.h)
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


_RENAMEAT2 = libc.function("renameat2", ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)


def _rename(source: Path, target: Path, flags: int) -> bool:
    """``renameat2(source, target, flags)``: True if done, False where the system or file system has no
    such call (the caller then falls back); FileExistsError when RENAME_NOREPLACE finds ``target``."""
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.EEXIST:
        raise FileExistsError(target)
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(target))


def reserve(fd: int, size: int, no_space: str) -> None:
    """Give the file ``fd`` its first ``size`` bytes of disk blocks now (an output, or data decoded to be
    mapped): a full disk is then this error, before any work, and never a SIGBUS while the file is written or
    read through a mapping, which would kill the process and leave the temporary file behind.

    A full disk or quota raises NoSpaceError with the message ``no_space`` (naming the file the user asked
    for). On a file system that cannot allocate ahead the file is only made ``size`` bytes long where it is
    shorter (sparse, as a last resort)."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise NoSpaceError(no_space) from None
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)


class Reservation:
    """:func:`reserve` of the file at ``path``, done by a thread of its own where the process has other work to do
    meanwhile (``background``: it loads the kernels; the file system allocates while the call waits, 0.24 s for
    1 GiB on tmpfs), else at once: where nothing overlaps it, a thread's start cost a service's request more than
    the allocation (14% of a 128 KiB permute's samples). Nothing may write the file before :meth:`wait`: where the
    file system cannot allocate, the C library emulates the call by writing a zero into each block it finds empty,
    over data written beside it."""

    def __init__(self, path: str | os.PathLike, size: int, no_space: str, *, background: bool) -> None:
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if not background:
            self._reserve(path, size, no_space)
            return
        self._thread = threading.Thread(target=self._reserve, args=(path, size, no_space), name="noa-reserve",
                                        daemon=True)
        self._thread.start()

    def _reserve(self, path: str | os.PathLike, size: int, no_space: str) -> None:
        try:
            fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                reserve(fd, size, no_space)
            finally:
                os.close(fd)
        except BaseException as exc:  # raised by wait(), in the thread that writes the file
            self._error = exc

    def wait(self) -> None:
        """Return once the file is reserved; raise what reserving it raised (NoSpaceError for a full disk)."""
        if self._thread is not None:
            self._thread.join()
        error, self._error = self._error, None
        if error is not None:
            raise error


def raise_if_full(exc: OSError, shown: str | os.PathLike, detail: str = "no space left on device") -> None:
    """A NoSpaceError naming the output ``shown`` (as the user named it) in place of ``exc``, a write's failure, when
    it says the disk or the user's quota is full."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        raise NoSpaceError(f"{shown}: {detail}") from None


def sync(fd: int, shown: str | os.PathLike, data_only: bool = False) -> None:
    """fsync (``data_only``: fdatasync) the output ``fd``: a full disk found only now (on a network file system, writes
    may reach the server only then) is a NoSpaceError naming the output as the user did (``shown``)."""
    try:
        (os.fdatasync if data_only else os.fsync)(fd)
    except OSError as exc:
        raise_if_full(exc, shown)
        raise


def fsync_output(path: Path, shown: str | os.PathLike) -> None:
    """The output ``path`` (a file, or every file and folder of a store) made durable; a full disk found now names
    it as the user did (``shown``: not its staging path)."""
    if os.path.isdir(path):
        _fsync_tree(path, shown)
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        sync(fd, shown)
    finally:
        os.close(fd)


def _fsync_tree(folder: Path, shown: str | os.PathLike) -> None:
    """fsync every file and folder under ``folder`` (a store: its chunks and metadata)."""
    for root, _, files in os.walk(folder):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                sync(fd, shown)
            finally:
                os.close(fd)
        fsync_folder(Path(root))


def fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # some systems cannot open folders; the rename itself is still atomic
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
