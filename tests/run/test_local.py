"""Every row of the file-to-file benchmark (benchmarks/bench_files.py) on a small volume, streamed in
many tiles by the pwrite engine, against NumPy on what mrcfile and tifffile read: data, header
statistics and pixel size."""

from __future__ import annotations

import errno
import gzip
import os
import shutil

import mrcfile
import numpy as np
import pytest
import tifffile

from helpers import write_mrc
from noa_core import operations
from noa_core.errors import NoSpaceError, OutputExistsError
from noa_core.run import local

SHAPE = (24, 96, 80)  # D, H, W: 720 KiB of float32, cut into tiles of 64 KiB below


@pytest.fixture
def volume(tmp_path):
    data = np.random.default_rng(15).normal(0, 100, SHAPE).astype(np.float32)
    write_mrc(tmp_path / "vol.mrc", data, voxel_size=1.5)
    return tmp_path / "vol.mrc", data


@pytest.fixture
def small_tiles(monkeypatch):
    monkeypatch.setattr(local, "TILE_BYTES", 64 << 10)


ROWS = {  # (operation, options, what NumPy makes of the volume, as D, H, W)
    "copy": ("copy", {}, lambda v: v),
    "permute 0,1,3,2": ("permute", {"axes": (0, 1, 3, 2)}, lambda v: v.transpose(0, 2, 1)),
    "permute 0,2,1,3": ("permute", {"axes": (0, 2, 1, 3)}, lambda v: v.transpose(1, 0, 2)),
    "permute 0,3,2,1": ("permute", {"axes": (0, 3, 2, 1)}, lambda v: v.transpose(2, 1, 0)),
    "float16": ("copy", {"dtype": "float16"}, lambda v: v.astype(np.float16)),
}


@pytest.mark.parametrize("row", list(ROWS))
def test_mrc_rows_match_numpy(volume, tmp_path, small_tiles, row):
    src, data = volume
    name, options, expected_of = ROWS[row]
    out = tmp_path / "out.mrc"
    local.write(operations.get(name).task(**options), src, out)
    expected = expected_of(data)
    with mrcfile.open(out) as f:
        np.testing.assert_array_equal(f.data, expected)
        wide = expected.astype(np.float64)
        assert (float(f.header.dmin), float(f.header.dmax)) == (wide.min(), wide.max())
        assert float(f.header.dmean) == pytest.approx(wide.mean(), rel=1e-6)
        assert float(f.header.rms) == pytest.approx(wide.std(), rel=1e-6)
        assert float(f.voxel_size.x) == pytest.approx(1.5)


def test_order_f_row_stores_columns_first(volume, tmp_path, small_tiles):
    src, data = volume
    out = tmp_path / "out.mrc"
    local.write(operations.get("copy").task(order="F"), src, out)
    with mrcfile.open(out) as f:  # mrcfile reads the bytes as stored: each section transposed
        np.testing.assert_array_equal(np.asarray(f.data).reshape(SHAPE[0], SHAPE[2], SHAPE[1]),
                                      data.transpose(0, 2, 1))


def test_tiff_row_matches_tifffile(volume, tmp_path, small_tiles):
    src, data = volume
    out = tmp_path / "out.tif"
    local.write(operations.get("copy").task(), src, out)
    np.testing.assert_array_equal(tifffile.imread(out), data)


def test_gzip_row_streams_the_same_bytes(volume, tmp_path, small_tiles):
    src, data = volume
    with open(src, "rb") as raw, gzip.open(tmp_path / "vol.mrc.gz", "wb") as packed:
        shutil.copyfileobj(raw, packed)
    local.write(operations.get("copy").task(), tmp_path / "vol.mrc.gz", tmp_path / "from_gz.mrc")
    local.write(operations.get("copy").task(), src, tmp_path / "plain.mrc")
    with mrcfile.open(tmp_path / "from_gz.mrc") as a, mrcfile.open(tmp_path / "plain.mrc") as b:
        np.testing.assert_array_equal(a.data, data)
        assert a.header.tobytes()[:1024 - 800] == b.header.tobytes()[:1024 - 800]  # all but the labels' times


def test_stats_row_matches_numpy(volume):
    src, data = volume
    result = operations.get("stats").describe(src)
    wide = data.astype(np.float64)
    assert (result["min"], result["max"]) == (wide.min(), wide.max())
    assert result["mean"] == pytest.approx(wide.mean(), rel=1e-9)
    assert result["std"] == pytest.approx(wide.std(), rel=1e-9)


def test_a_plain_copy_reads_straight_into_the_buffer_it_writes(volume, tmp_path, small_tiles, monkeypatch):
    """The copy row's fast path (no compute at all) is taken, and its bytes are those of the input."""
    from noa_core.io import mapped

    src, _data = volume
    landed = []
    original = mapped.read_view

    def spy(array, slot=0, into=None):
        result = original(array, slot, into)
        landed.append(into is not None and np.shares_memory(result, into))
        return result

    monkeypatch.setattr(mapped, "read_view", spy)
    local.write(operations.get("copy").task(), src, tmp_path / "out.mrc")
    assert len(landed) > 1 and all(landed)
    with open(src, "rb") as a, open(tmp_path / "out.mrc", "rb") as b:
        header = 1024 + int(mrcfile.open(src).header.nsymbt)
        assert a.read()[header:] == b.read()[1024 + int(mrcfile.open(tmp_path / "out.mrc").header.nsymbt):]


def test_decompressed_inputs_are_not_split_over_processes(volume, tmp_path):
    """A Dask task re-plans from the input's path: a decompressed input would be decompressed again by
    every task, so only inputs other processes can map by path count as mapped."""
    from noa_core import io
    from noa_core.io import mapped

    src, _ = volume
    with open(src, "rb") as raw, gzip.open(tmp_path / "vol.mrc.gz", "wb") as packed:
        shutil.copyfileobj(raw, packed)
    assert mapped.is_mapped(io.read(src)[0].numpy())
    assert not mapped.is_mapped(io.read(tmp_path / "vol.mrc.gz")[0].numpy())


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint16, np.float16, np.complex64])
def test_every_stored_type_is_written_where_numpy_puts_it(tmp_path, small_tiles, dtype):
    """The pwrite engine moves bytes, whatever their type (complex, half floats, bytes)."""
    rng = np.random.default_rng(2)
    data = (rng.normal(0, 50, SHAPE) + (1j if np.dtype(dtype).kind == "c" else 0)).astype(dtype)
    write_mrc(tmp_path / "in.mrc", data)
    local.write(operations.get("permute").task(axes=(0, 1, 3, 2)), tmp_path / "in.mrc", tmp_path / "out.mrc")
    with mrcfile.open(tmp_path / "out.mrc") as f:
        np.testing.assert_array_equal(f.data, data.transpose(0, 2, 1))


def test_side_files_are_placed_with_the_output_all_or_none(volume, tmp_path, small_tiles):
    """A plan's side files (text beside the output, as a tilt series' angles) are written and placed with the output;
    one that exists is refused before anything is written; a tile that fails leaves neither, and what they were to
    replace stays as it was."""
    src, data = volume
    out = tmp_path / "out.mrc"

    def planned(fail: bool = False):
        plan = operations.get("copy").task().plan(src)
        plan.side_files = lambda dst: ({dst.with_suffix(".txt"): b"beside\n"}, ["one file beside"])
        if fail:
            def failing(blocks, tile):
                raise OSError("a tile failed")

            assert plan.compute is not None  # a copy: the same tile of its input
            plan.compute = failing
        return plan

    assert "one file beside" in local.write_plan(planned(), out)
    with mrcfile.open(out) as written:
        np.testing.assert_array_equal(written.data, data)
    assert (tmp_path / "out.txt").read_bytes() == b"beside\n"
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    (tmp_path / "new.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match=r"new\.txt"):
        local.write_plan(planned(), tmp_path / "new.mrc")
    assert not (tmp_path / "new.mrc").exists() and (tmp_path / "new.txt").read_text() == "mine"
    (tmp_path / "new.txt").unlink()
    with pytest.raises(OSError, match="a tile failed"):
        local.write_plan(planned(fail=True), out, overwrite=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no staging folder left either


def test_a_full_disk_found_at_the_sync_of_outputs_placed_together_names_the_output(tmp_path, monkeypatch):
    """A full disk that a network file system reports only at the fsync of the staged outputs is one NoSpaceError
    naming the output as the user did, not its staging path; none is placed and nothing is left."""

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    outputs = [tmp_path / "a.mrc", tmp_path / "b.mrc"]
    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(NoSpaceError) as full, local.placed_together(outputs, False) as staging:
        for out in outputs:
            (staging / out.name).write_bytes(b"data")
    assert str(full.value) == f"{outputs[0]}: no space left on device"
    assert list(tmp_path.iterdir()) == []
