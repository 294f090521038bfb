"""Atomic outputs: permissions, durability, and the scratch mode of the HTTP service's uploads."""

from __future__ import annotations

import collections
import errno
import os
import threading
from pathlib import Path

import mrcfile
import numpy as np
import pytest

import noa_core as noa
from noa_core import io
from noa_core.compute import compute_path
from noa_core.compute.tiles import TILE_BYTES
from noa_core.errors import NoSpaceError, NotAFileError
from noa_core.io import atomic


@pytest.fixture
def fsync_calls(monkeypatch) -> list[int]:
    """Record the file descriptors passed to os.fsync (the real fsync still runs)."""
    calls: list[int] = []
    real = os.fsync

    def spy(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(atomic.os, "fsync", spy)
    return calls


def _write(path) -> np.ndarray:
    data = np.arange(2 * 3 * 4, dtype=np.float32).reshape(1, 2, 3, 4)
    io.write(path, noa.asarray(data))
    return data


def test_outputs_are_synced_by_default(tmp_path, fsync_calls):
    data = _write(tmp_path / "out.mrc")
    assert len(fsync_calls) == 2  # the file, then its folder (the rename)
    array, _ = io.read(tmp_path / "out.mrc")
    np.testing.assert_array_equal(array.numpy(), data)


def test_scratch_outputs_skip_fsync_but_stay_atomic(tmp_path, fsync_calls):
    with atomic.scratch_outputs():
        data = _write(tmp_path / "out.mrc")
    assert fsync_calls == []
    array, _ = io.read(tmp_path / "out.mrc")
    np.testing.assert_array_equal(array.numpy(), data)
    assert [p.name for p in tmp_path.iterdir()] == ["out.mrc"]  # no temporary file left
    _write(tmp_path / "after.mrc")  # the block is over: durable again
    assert len(fsync_calls) == 2


def test_scratch_outputs_apply_to_the_calling_thread_only(tmp_path, fsync_calls):
    entered, written = threading.Event(), threading.Event()

    def scratch_writer() -> None:
        with atomic.scratch_outputs():
            entered.set()
            written.wait(10)

    thread = threading.Thread(target=scratch_writer)
    thread.start()
    entered.wait(10)
    _write(tmp_path / "other.mrc")  # another thread, while the scratch block is open
    written.set()
    thread.join()
    assert len(fsync_calls) == 2


def test_output_mode_follows_the_umask(tmp_path):
    _write(tmp_path / "out.mrc")
    mode = (tmp_path / "out.mrc").stat().st_mode & 0o777
    assert mode == 0o666 & ~atomic._UMASK


_KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from noa_core.io import atomic
temp = atomic.TemporaryOutput(Path(sys.argv[1]), overwrite=False)
print(temp.temp, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # dies mid-write: no abort, no commit
"""

_LIVE_WRITER = """
import sys, time
from pathlib import Path
from noa_core.io import atomic
temp = atomic.TemporaryOutput(Path(sys.argv[1]), overwrite=False)
print(temp.temp, flush=True)
time.sleep(60)
"""


def _age(path, seconds: float) -> None:
    past = os.stat(path).st_mtime - seconds
    os.utime(path, (past, past))


def test_the_next_writer_removes_what_a_killed_writer_left(tmp_path, monkeypatch):
    """A writer SIGKILLed mid-write leaves its temporary file; once it is older than the grace
    period, the next writer of the same output removes it. Younger files, files of other outputs,
    and files a live writer holds are left alone."""
    import subprocess
    import sys

    # This process lists a folder once, known by its inode: an earlier test's folder, removed as it passed, may
    # have had this one's
    monkeypatch.setattr(atomic, "_LISTED", collections.OrderedDict())
    out = tmp_path / "out.mrc"
    killed = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(out)], capture_output=True, text=True,
                            timeout=120)
    assert killed.returncode == -9
    abandoned = tmp_path / os.path.basename(killed.stdout.strip())
    assert abandoned.exists() and abandoned.name.endswith(atomic.TEMP_SUFFIX)
    other = tmp_path / ".other.mrc.x1.noa-tmp"  # another output's
    other.write_bytes(b"x")
    _age(other, 2 * atomic.ABANDONED_AFTER_S)

    live = subprocess.Popen([sys.executable, "-c", _LIVE_WRITER, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        held = tmp_path / os.path.basename(live.stdout.readline().strip())
        assert abandoned.exists()  # too young to be taken for abandoned
        for path in (abandoned, held):
            _age(path, 2 * atomic.ABANDONED_AFTER_S)
        data = _write(out)
        assert not abandoned.exists()
        assert held.exists() and other.exists()
        np.testing.assert_array_equal(io.read(out)[0].numpy(), data)
    finally:
        live.kill()
        live.wait()
    assert atomic.remove_abandoned(out) == [held]  # its writer is gone now


def test_leftovers_are_found_by_folder_not_by_path(tmp_path, monkeypatch):
    """The service writes into /proc/self/fd/N/ folders, and descriptor numbers are reused: a listing
    made through one folder's descriptor must not stand for another folder that later gets the number.
    (This process starts with no folder listed: one an earlier test listed and removed may have left its
    inode number to ``second``, found by CI.)"""
    monkeypatch.setattr(atomic, "_LISTED", collections.OrderedDict())
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    fd = os.open(first, os.O_RDONLY | os.O_DIRECTORY)
    via = Path(f"/proc/self/fd/{fd}")
    atomic.TemporaryOutput(via / "out.mrc", overwrite=False).abort()  # lists `first` through the descriptor
    os.close(fd)
    left = second / ".out.mrc.killed.noa-tmp"  # what a killed writer left in the other folder
    left.write_bytes(b"x")
    _age(left, 2 * atomic.ABANDONED_AFTER_S)
    reused = os.open(second, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert reused == fd  # the lowest free number: the same path now names the other folder
        atomic.TemporaryOutput(via / "out.mrc", overwrite=False).abort()
    finally:
        os.close(reused)
    assert not left.exists()


# -- reserving disk blocks ahead (one reserve for outputs and for data decoded to be mapped) -----------------


def _failing_fallocate(code: int):
    def fallocate(fd: int, offset: int, length: int) -> None:
        raise OSError(code, os.strerror(code))
    return fallocate


def test_reserve_gives_the_blocks_or_names_the_output_when_the_disk_is_full(tmp_path, monkeypatch):
    with open(tmp_path / "a", "w+b") as f:
        atomic.reserve(f.fileno(), 1 << 20, "never told")
        assert os.fstat(f.fileno()).st_size == 1 << 20
    for code in (errno.ENOSPC, errno.EDQUOT):
        monkeypatch.setattr(os, "posix_fallocate", _failing_fallocate(code))
        with open(tmp_path / "b", "w+b") as f, pytest.raises(NoSpaceError, match=r"^b.mrc: no room$"):
            atomic.reserve(f.fileno(), 100, "b.mrc: no room")
    monkeypatch.setattr(os, "posix_fallocate", _failing_fallocate(errno.EBADF))
    with open(tmp_path / "c", "w+b") as f, pytest.raises(OSError) as other:
        atomic.reserve(f.fileno(), 100, "c")
    assert other.value.errno == errno.EBADF


def test_a_writer_reserves_its_file_beside_the_kernels_loading_and_writes_after(tmp_path, monkeypatch):
    """Where the work loads the kernels first, the Writer allocates its output's blocks in a thread of its own:
    entering it returns while the file system is still allocating, and the first write waits for the allocation."""
    started, release, reserved = threading.Event(), threading.Event(), threading.Event()
    allocate = os.posix_fallocate

    def slow_fallocate(fd: int, offset: int, length: int) -> None:
        started.set()
        assert release.wait(10)
        allocate(fd, offset, length)
        reserved.set()

    monkeypatch.setattr(os, "posix_fallocate", slow_fallocate)
    monkeypatch.setattr(compute_path, "kernels_to_load", lambda: True)
    data = _more_than_a_tile()
    with io.create(tmp_path / "out.mrc", data.shape, data.dtype) as out:
        assert started.wait(10) and not reserved.is_set()
        threading.Timer(0.2, release.set).start()
        out.write_block(0, data)
        assert reserved.is_set()
    np.testing.assert_array_equal(mrcfile.read(tmp_path / "out.mrc"), data)


def test_a_writer_with_nothing_to_overlap_reserves_its_file_at_once_in_the_callers_thread(tmp_path, monkeypatch):
    """Kernels loaded already (a service) or none to load (the NumPy path): no thread is started for the
    allocation, which is done before the Writer is entered."""
    allocate, reserving = os.posix_fallocate, []

    def recorded_fallocate(fd: int, offset: int, length: int) -> None:
        reserving.append(threading.current_thread())
        allocate(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", recorded_fallocate)
    monkeypatch.setattr(compute_path, "kernels_to_load", lambda: False)
    data = _more_than_a_tile()
    with io.create(tmp_path / "out.mrc", data.shape, data.dtype) as out:
        assert reserving == [threading.current_thread()]
        out.write_block(0, data)
    np.testing.assert_array_equal(mrcfile.read(tmp_path / "out.mrc"), data)


def _more_than_a_tile() -> np.ndarray:
    """An output the Writer gives its blocks before any work (more than TILE_BYTES)."""
    sections = TILE_BYTES // (1 << 22) + 1
    return np.arange(sections << 20, dtype=np.float32).reshape(sections, 1024, 1024)


def test_an_output_of_a_tile_or_less_gets_its_blocks_only_when_mapped(tmp_path, monkeypatch):
    """A small output filled with pwrite is not allocated ahead (the file system does it as the write lands), and a
    full disk is found by that write: one NoSpaceError naming the output, and nothing left. Written through a
    mapping, it is allocated before the mapping, whose writes would otherwise die of SIGBUS on a full disk."""
    allocate, reserving = os.posix_fallocate, []

    def recorded_fallocate(fd: int, offset: int, length: int) -> None:
        reserving.append(length)
        allocate(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", recorded_fallocate)
    data = _write(tmp_path / "pwritten.mrc")
    assert reserving == []
    np.testing.assert_array_equal(mrcfile.read(tmp_path / "pwritten.mrc"), data[0])
    with io.create(tmp_path / "mapped.mrc", data.shape, data.dtype) as out:
        assert reserving == []
        out.write_block(0, data)
        assert reserving == [1024 + data.nbytes]
    np.testing.assert_array_equal(mrcfile.read(tmp_path / "mapped.mrc"), data[0])

    def full_disk(fd: int, *args) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk)  # a network file system's: the writes reach its server then
    with pytest.raises(NoSpaceError, match=rf"^{tmp_path / 'synced.mrc'}: no space left on device$"):
        _write(tmp_path / "synced.mrc")
    monkeypatch.setattr(os, "pwrite", full_disk)
    with pytest.raises(NoSpaceError, match=rf"^{tmp_path / 'full.mrc'}: no space left on device$"):
        _write(tmp_path / "full.mrc")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mapped.mrc", "pwritten.mrc"]


@pytest.mark.parametrize("background", [True, False])
def test_a_reservation_that_fails_raises_in_the_thread_that_waits(tmp_path, background):
    reservation = atomic.Reservation(tmp_path / "missing", 100, "never told", background=background)
    with pytest.raises(FileNotFoundError):
        reservation.wait()


@pytest.mark.parametrize("code", [errno.EOPNOTSUPP, errno.EINVAL])
def test_a_file_system_without_fallocate_gets_a_sparse_file_of_the_size(tmp_path, monkeypatch, code):
    monkeypatch.setattr(os, "posix_fallocate", _failing_fallocate(code))
    with open(tmp_path / "short", "w+b") as f:
        atomic.reserve(f.fileno(), 4096, "never told")
        assert os.fstat(f.fileno()).st_size == 4096
    (tmp_path / "long").write_bytes(b"x" * 8192)  # an output laid out longer than its data is kept whole
    with open(tmp_path / "long", "r+b") as f:
        atomic.reserve(f.fileno(), 4096, "never told")
    assert (tmp_path / "long").read_bytes() == b"x" * 8192


def _eer_movie(path: Path) -> None:
    from test_eer import movie

    movie(path)


@pytest.mark.parametrize("kind", ["output", "eer", "omezarr"])
def test_outputs_and_decoded_inputs_reserve_their_blocks_the_same_way(tmp_path, monkeypatch, kind):
    """A file written (the Writer), an EER movie's fractions and an OME-Zarr store's data decoded to be mapped:
    a full disk is one NoSpaceError naming the file the user named, and a file system that cannot allocate
    ahead still works."""
    if kind == "output":  # one of more than a tile: smaller ones are not given their blocks ahead (test above)
        data = _more_than_a_tile()
        path = tmp_path / "out.mrc"
        refused = f"{path}: no space left on device for its {1024 + data.nbytes} bytes"
        act = lambda: (io.write(path, noa.asarray(data)), io.read(path)[0].numpy())[1]  # noqa: E731
    else:
        path = tmp_path / ("m.eer" if kind == "eer" else "s.ome.zarr")
        if kind == "eer":
            _eer_movie(path)
        else:
            io.write(path, np.arange(24, dtype=np.float32).reshape(2, 3, 4))
        refused = f"{path}: {'' if kind == 'eer' else 'shape: '}decoding the "
        act = lambda: io.read(path)[0].numpy().copy()  # noqa: E731
    expected = act()
    monkeypatch.setattr(os, "posix_fallocate", _failing_fallocate(errno.ENOSPC))
    if kind == "output":
        path.unlink()
    with pytest.raises(NoSpaceError) as full:
        act()
    assert str(full.value).startswith(refused), str(full.value)
    assert kind != "output" or not path.exists()
    monkeypatch.setattr(os, "posix_fallocate", _failing_fallocate(errno.EOPNOTSUPP))
    np.testing.assert_array_equal(act(), expected)


def test_folders_made_for_outputs_are_removed_when_the_outputs_fail(tmp_path):
    (tmp_path / "there").mkdir()
    with atomic.folders_made([tmp_path / "new", tmp_path / "there", tmp_path / "new"]):
        assert (tmp_path / "new").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "there"]
    with pytest.raises(RuntimeError), atomic.folders_made([tmp_path / "gone", tmp_path / "busy", tmp_path / "there"]):
        (tmp_path / "busy" / "someone's").write_bytes(b"")
        raise RuntimeError("the outputs failed")
    # the folders it made are removed, but one something else was put in meanwhile, and those that were there
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy", "new", "there"]
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(NotAFileError, match="is not a folder"), atomic.folders_made([tmp_path / "file"]):
        pass
