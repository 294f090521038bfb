"""Memory-mapped I/O turns a shrinking input and a full disk into SIGBUS, which kills a process without a
word and leaves its temporary file behind. noa reads tiles with pread and reserves its outputs before
writing, so both are errors (exit 2, one line) and nothing is left. Each case runs in a subprocess, so
that a regression shows as a signal instead of killing the test run. Views whose values lie far apart (a
volume's x slice) are read value by value and held packed, against mrcfile's values."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import mrcfile
import numpy as np
import pytest

from helpers import NOA, load, random_values, write_mrc
from noa_core import io
from noa_core.io import mapped


def test_an_input_truncated_after_it_was_mapped_is_an_error(tmp_path):
    src, pristine = tmp_path / "in.mrc", tmp_path / "pristine.mrc"
    write_mrc(pristine, np.arange(64 * 256 * 256, dtype=np.float32).reshape(64, 256, 256))  # 16 MiB
    code = textwrap.dedent(f"""
        import os, shutil
        from noa_core import io, operations
        from noa_core.errors import TruncatedFileError
        from noa_core.io.stream import batch_statistics
        from noa_core.run import local

        for axes in ((0, 1, 2, 3), (0, 2, 1, 3)):  # a plain copy, and a permutation crossing sections
            shutil.copy({str(pristine)!r}, {str(src)!r})
            plan = operations.get("permute").task(axes=axes).plan({str(src)!r})  # the input is mapped now
            os.truncate({str(src)!r}, 1024 + (8 << 20))  # half the data gone, as another program may do
            try:
                local.write_plan(plan, {str(tmp_path / 'out.mrc')!r})
            except TruncatedFileError as exc:
                print("refused:", exc)

        shutil.copy({str(pristine)!r}, {str(src)!r})  # what `noa stats` reads: tiles of the mapped input
        array, _ = io.read({str(src)!r})
        os.truncate({str(src)!r}, 1024 + (8 << 20))
        try:
            batch_statistics(array)
        except TruncatedFileError as exc:
            print("refused:", exc)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])  # -7 would be SIGBUS
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and all("in.mrc: data: the file changed size while being read" in x for x in lines), lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mrc", "pristine.mrc"]  # no output, no temporary file


def _in_small_tmpfs(tmp_path: Path, command: str) -> subprocess.CompletedProcess:
    """Run ``command`` (sh) in a mount namespace where ``tmp_path/small`` is an 8 MiB tmpfs."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) to mount a small tmpfs in a namespace")
    small = tmp_path / "small"
    small.mkdir()
    script = f"mount -t tmpfs -o size=8m tmpfs {small} || exit 99; {command}; echo rc=$?; ls -A {small}"
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=120)
    if "rc=" not in done.stdout and done.returncode in (1, 99):
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {done.stderr.strip()[:200]}")
    return done


def test_a_full_disk_is_found_before_writing_and_leaves_nothing(tmp_path):
    src = tmp_path / "in.mrc"
    data = write_mrc(src, np.ones((4, 1024, 1024), np.float32))  # 16 MiB: twice the disk
    done = _in_small_tmpfs(tmp_path, f"{NOA[0]} copy {src} {tmp_path / 'small' / 'out.mrc'}")
    listing = done.stdout.splitlines()
    assert listing[0] == "rc=2", (done.stdout, done.stderr)  # not 135 (128 + SIGBUS)
    assert listing[1:] == []  # nothing left on the small disk
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "out.mrc: no space left on device" in errors[0], done.stderr
    # the same input fits elsewhere: the refusal was about space, not about the file
    out = tmp_path / "fits.mrc"
    assert subprocess.run([*NOA, "copy", str(src), str(out)], capture_output=True, timeout=120).returncode == 0
    np.testing.assert_array_equal(load(out), data)



# -- views read value by value ------------------------------------------------------------------------

SPACED_DTYPES = ["<f4", ">f4", "<i2", ">i2", "int8", "<u2", "<f2", "<c8"]


def _spaced_volume(tmp_path: Path, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(mapped D x H x W view, mrcfile's values) of a volume whose rows are just over SPACED_BYTES, odd sizes, and
    whose x slice (H x D values) is a line longer than one preadv takes."""
    dt = np.dtype(dtype)
    width = mapped.SPACED_BYTES // dt.itemsize + 3
    shape = (3, mapped.IOV_MAX // 2 + 5, width)  # 3 x 517 values a slice: one line of 1551, in two calls
    write_mrc(tmp_path / "v.mrc", random_values(shape, dt.newbyteorder("=")).astype(dt))
    with mrcfile.open(tmp_path / "v.mrc") as f:
        assert f.data.dtype == dt  # the mode and byte order asked for
        expected = np.array(f.data)
    array, _ = io.read(tmp_path / "v.mrc")
    return array.numpy()[0], expected


@pytest.mark.parametrize("dtype", SPACED_DTYPES)
def test_views_of_values_far_apart_are_read_packed_with_mrcfiles_values(tmp_path, dtype):
    """x slices (whole, cropped, every 3rd row, every 2nd section, of a transposed view) have values a row apart:
    read_view reads them value by value and holds them packed, no gap between them, with mrcfile's values (a
    big-endian file is swapped into memory as it is opened: its views are given back as they are)."""
    data, expected = _spaced_volume(tmp_path, dtype)
    packed = np.dtype(dtype).isnative
    width = data.shape[2]
    views = {"x slice": np.s_[:, :, width // 2], "cropped": np.s_[1:, 3:-2, width - 1], "every 3rd row":
             np.s_[:, ::3, 5], "every 2nd section": np.s_[::2, :, 0], "one column": np.s_[1, :, 7]}
    for name, key in views.items():
        view = data[key]
        assert mapped.reads_spaced(view), name
        got = mapped.read_view(view)
        np.testing.assert_array_equal(got, expected[key], err_msg=name)
        low, high = np.lib.array_utils.byte_bounds(got)
        assert (high - low == got.nbytes) == packed, f"{name}: {high - low} bytes held for {got.nbytes} of values"
    sideways = data.transpose(1, 0, 2)[:, :, 2]  # rows are sections: lines cross them
    np.testing.assert_array_equal(mapped.read_view(sideways), expected.transpose(1, 0, 2)[:, :, 2])
    assert not mapped.reads_spaced(data[:, :, 2:4]) and not mapped.reads_spaced(data[:, 4])  # runs of values


def test_a_spaced_read_lands_in_the_buffer_given(tmp_path):
    """With ``into`` laid out as the packed values, they are read straight into it."""
    data, expected = _spaced_volume(tmp_path, "<f4")
    into = np.empty((data.shape[0], data.shape[1]), np.float32)
    got = mapped.read_view(data[:, :, 9], into=into)
    assert np.shares_memory(got, into)
    np.testing.assert_array_equal(into, expected[:, :, 9])


@pytest.mark.parametrize("axes", [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)])
@pytest.mark.parametrize("width", [256, 8])  # rows of 1 KiB (read into the buffer's rows) and of 32 bytes
@pytest.mark.parametrize("run_bytes", [1 << 10, None])  # runs of a row each; the whole volume in one run
def test_a_permuted_read_fills_the_buffer_given_in_its_order(tmp_path, monkeypatch, axes, width, run_bytes):
    """A tile of a permuted copy: rows that lie in the file one after another but in the buffer apart (sections
    and rows swapped) are read straight into their places, one preadv per run of the file; other orders, and runs
    with gaps (a crop), are read packed and given back as they lie, for the copy to reorder. Values as mrcfile
    reads them, either way."""
    if run_bytes is not None:
        monkeypatch.setattr(mapped, "RUN_BYTES", run_bytes)
    src = tmp_path / "in.mrc"
    expected = random_values((6, 40, width))
    write_mrc(src, expected)
    data = io.read(src)[0].numpy()[0]
    in_place = axes == (0, 1, 2) or (axes == (1, 0, 2) and width * 4 >= mapped.SCATTER_BYTES)
    # cropped, a run of the whole volume has gaps (the rows left out); a run of a row has none
    for crop, shared in ((np.s_[:], in_place), (np.s_[1:, 2:], in_place and run_bytes is not None)):
        view, wanted = data.transpose(axes)[crop], expected.transpose(axes)[crop]
        into = np.empty(view.shape, view.dtype)
        got = mapped.read_view(view, into=into)
        np.testing.assert_array_equal(got, wanted)
        assert np.shares_memory(got, into) == shared, (axes, width, crop)
    # broadcast along a new axis (noa broadcast): its runs fill one copy; the copy kernel makes the others
    view = np.broadcast_to(data.transpose(axes), (3, *data.transpose(axes).shape))
    got = mapped.read_view(view, into=np.full(view.shape, np.nan, view.dtype))
    np.testing.assert_array_equal(got, np.broadcast_to(expected.transpose(axes), view.shape))


def test_a_spaced_read_of_a_truncated_input_is_an_error(tmp_path):
    """Read value by value with pread too: a file that shrank after it was mapped is an error naming it, not
    SIGBUS (run in a subprocess, so that a regression shows as a signal)."""
    src = tmp_path / "in.mrc"
    write_mrc(src, np.ones((8, 300, 300), np.float32))
    code = textwrap.dedent(f"""
        import os
        from noa_core import io
        from noa_core.errors import TruncatedFileError
        from noa_core.io import mapped

        array, _ = io.read({str(src)!r})
        view = array.numpy()[0, :, :, 150]
        assert mapped.reads_spaced(view)
        os.truncate({str(src)!r}, 1024 + 4 * 300 * 300 * 3)
        try:
            mapped.read_view(view)
        except TruncatedFileError as exc:
            print("refused:", exc)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.startswith("refused: ") and "in.mrc: data: the file changed size while being read" in \
        done.stdout, done.stdout


def _read_rows_and_save(path: Path, out: Path) -> None:
    data = io.read(path)[0].numpy()[0]
    np.save(out, mapped.read_view(data[:, ::2]))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX's")
def test_a_forked_child_reads_with_threads_of_its_own(tmp_path, monkeypatch):
    """A process forked after its parent read runs side by side (its reading threads started) reads too: the child
    has none of the parent's threads, so it starts its own (else its reads would wait for threads not there)."""
    values = random_values((64, 256, 256), seed=3)
    write_mrc(tmp_path / "v.mrc", values)
    monkeypatch.setattr(mapped, "PARALLEL_BYTES", 1 << 16)
    monkeypatch.setenv("NUMBA_NUM_THREADS", "2")  # io_threads: two readers however many cores
    data = io.read(tmp_path / "v.mrc")[0].numpy()[0]
    np.testing.assert_array_equal(mapped.read_view(data[:, ::2]), values[:, ::2])  # the parent's threads started
    assert mapped._READERS
    child = multiprocessing.get_context("fork").Process(target=_read_rows_and_save,
                                                        args=(tmp_path / "v.mrc", tmp_path / "rows.npy"))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0, "the child did not finish reading"
    np.testing.assert_array_equal(np.load(tmp_path / "rows.npy"), values[:, ::2])
