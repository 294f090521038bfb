"""Atomic outputs: permissions, durability, and the scratch mode of the HTTP service's uploads."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import noa_core as noa
from noa_core import io
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
