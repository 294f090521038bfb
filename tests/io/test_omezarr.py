"""OME-Zarr stores as a format of noa's io protocol: noa reads what zarr and ome-zarr-py write, and they
read what noa writes (values, axes, scale and units); outputs are atomic directories.

OME-Zarr stores built to hurt (issue 32, items 7, 8, 10, 11, 14, 15b): chunks that are folders, links
out of the store (and out of the data root in paths mode), FIFOs, chunk shapes and compressed chunks
that decode to far more than the array, outputs with too many chunks or too little room, and the
decoded copy of a store left behind by a killed process. Each is refused with one line naming the
file and field, before memory, disk or time go in proportion to what the store claims."""

from __future__ import annotations

import bz2
import json
import lzma
import os
import struct
import subprocess
import sys
import tempfile
import time
import tracemalloc
import zlib
from pathlib import Path

import mrcfile
import numcodecs
import numpy as np
import pytest
import zarr
from conformance import FormatTests
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import REPO, assert_problem, assert_user_error, noa, start_server, write_mrc
from noa_core import io, limits
from noa_core.errors import (
    AxisMappingError,
    CorruptFileError,
    FileFormatError,
    HeaderError,
    LayoutError,
    LimitError,
    NoSpaceError,
    NotAFileError,
    OutputExistsError,
    ParameterError,
)
from noa_core.io import atomic, formats, omezarr
from noa_core.io.metadata import Metadata


def _ome_zarr_py_read(path):
    """Level 0 and its metadata as ome-zarr-py reads the store."""
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    node = next(iter(Reader(parse_url(str(path)))()))
    return np.asarray(node.data[0]), node.metadata


def _ome_zarr_py_write(path, data, axes, scale, units, version="0.4", levels=1, chunks=None):
    """A store written by ome-zarr-py: ``levels`` levels, each halving y and x, with ``scale`` at level 0."""
    from ome_zarr.format import FormatV04, FormatV05
    from ome_zarr.writer import write_multiscale

    fmt = FormatV04() if version == "0.4" else FormatV05()
    group = zarr.open_group(str(path), mode="w", zarr_format=2 if version == "0.4" else 3)
    pyramid, transforms = [], []
    for level in range(levels):
        step = [2 ** level if a in "yx" else 1 for a in axes]
        pyramid.append(data[tuple(slice(None, None, s) for s in step)])
        transforms.append([{"type": "scale", "scale": [s * k for s, k in zip(scale, step)]}])
    axes_list = [{"name": a, "type": {"t": "time", "c": "channel"}.get(a, "space"),
                  **({"unit": units} if a in "zyx" else {})} for a in axes]
    write_multiscale(pyramid, group, fmt=fmt, axes=axes_list, coordinate_transformations=transforms,
                     storage_options=None if chunks is None else {"chunks": chunks})


# ---------------------------------------------------------------------------------------------
# noa writes, zarr and ome-zarr-py read
# ---------------------------------------------------------------------------------------------

shapes = st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(1, 7), st.integers(1, 9))


@settings(max_examples=20, deadline=None)
@given(shape=shapes, version=st.sampled_from(["0.4", "0.5"]), fortran=st.booleans(),
       dtype=st.sampled_from(["float32", "uint16", "int8", "float64"]))
def test_noa_writes_what_zarr_reads_back_with_axes_and_scale(tmp_path_factory, shape, version, fortran, dtype):
    folder = tmp_path_factory.mktemp("w")
    data = (np.arange(np.prod(shape)) % 97).reshape(shape).astype(dtype)
    source = np.asfortranarray(data) if fortran else data
    meta = Metadata(format="mrc", shape=shape, dtype=dtype, pixel_size=(2.5, 1.25, 0.5), origin=(0.0, 4.0, 8.0))
    with io.create(folder / "a.ome.zarr", shape, dtype, meta, write_options={"ngff": version},
                   order="F" if fortran else "C") as out:
        io.copy_into(source, out)
    stored, names = omezarr.stored_axes(shape)
    group = zarr.open_group(str(folder / "a.ome.zarr"), mode="r")
    assert group.metadata.zarr_format == omezarr.NGFF_VERSIONS[version]
    np.testing.assert_array_equal(group["0"][...], data.reshape(stored))
    assert group["0"].dtype == np.dtype(dtype)
    attrs = group.attrs.asdict()
    ome = attrs["ome"] if version == "0.5" else attrs["multiscales"][0]
    image = (attrs["ome"]["multiscales"] if version == "0.5" else attrs["multiscales"])[0]
    assert ome["version"] == version
    assert [a["name"] for a in image["axes"]] == list(names)
    size = {"t": 1.0, "z": 2.5, "y": 1.25, "x": 0.5}
    transforms = image["datasets"][0]["coordinateTransformations"]
    assert transforms[0] == {"type": "scale", "scale": [size[a] for a in names]}
    assert all(a.get("unit") == "angstrom" for a in image["axes"] if a["name"] in "zyx")
    back, read_meta = io.read(folder / "a.ome.zarr")
    np.testing.assert_array_equal(back.numpy(), data)
    assert read_meta.unit == "Å"
    expected = tuple(p for p, _ in zip((2.5, 1.25, 0.5), shape[1:]))
    assert read_meta.pixel_size[1:] == expected[1:]
    assert read_meta.pixel_size[0] == (2.5 if shape[1] > 1 else 0.0)  # a depth of 1 is not stored: no z scale


def test_ome_zarr_py_reads_a_noa_copy_of_an_mrc_volume_with_its_voxel_size(tmp_path):
    data = write_mrc(tmp_path / "v.mrc", np.random.default_rng(1).random((5, 6, 7), dtype=np.float32),
                     voxel_size=(1.5, 2.0, 3.0))  # x, y, z
    assert noa("copy", tmp_path / "v.mrc", tmp_path / "v.ome.zarr").returncode == 0
    values, metadata = _ome_zarr_py_read(tmp_path / "v.ome.zarr")
    np.testing.assert_array_equal(values, data)
    assert metadata["coordinateTransformations"][0] == [{"type": "scale", "scale": [3.0, 2.0, 1.5]}]
    assert [(a["name"], a.get("unit")) for a in metadata["axes"]] == [("z", "angstrom"), ("y", "angstrom"),
                                                                       ("x", "angstrom")]
    assert noa("copy", tmp_path / "v.ome.zarr", tmp_path / "back.mrc").returncode == 0
    with mrcfile.open(tmp_path / "back.mrc") as back:
        np.testing.assert_array_equal(back.data, data)
        assert tuple(back.voxel_size.item()) == (1.5, 2.0, 3.0)


def test_an_unknown_pixel_size_stays_unknown(tmp_path):
    io.write(tmp_path / "u.ome.zarr", np.ones((3, 4), np.float32))
    attrs = json.loads((tmp_path / "u.ome.zarr" / ".zattrs").read_text())
    image = attrs["multiscales"][0]
    assert image["datasets"][0]["coordinateTransformations"] == [{"type": "scale", "scale": [1.0, 1.0]}]
    assert all("unit" not in a for a in image["axes"])
    assert io.read(tmp_path / "u.ome.zarr")[1].pixel_size == (0.0, 0.0, 0.0)


def test_chunks_are_whole_sections_capped_and_can_be_chosen(tmp_path):
    assert omezarr.default_chunks((4, 100, 100), 4) == (4, 100, 100)
    assert omezarr.default_chunks((64, 1024, 1024), 4) == (4, 1024, 1024)  # 16 MiB: 4 sections
    assert omezarr.default_chunks((3, 8192, 8192), 4) == (1, 512, 8192)  # a section of 256 MiB: bands of rows
    assert omezarr.default_chunks((5, 7), 2, budget=4) == (1, 2)  # a row larger than the budget: pieces of it
    data = np.arange(6 * 10 * 12, dtype=np.int16).reshape(6, 10, 12)
    with io.create(tmp_path / "c.zarr", (1, 6, 10, 12), "int16", write_options={"chunks": "2,3,5"}) as out:
        io.copy_into(data, out)
    array = zarr.open_array(str(tmp_path / "c.zarr" / "0"), mode="r")
    assert array.chunks == (2, 3, 5)
    np.testing.assert_array_equal(array[...], data)
    # sections written one call at a time, cutting chunks: zarr merges them (one process)
    with io.create(tmp_path / "w.zarr", (2, 3, 10, 12), "float32", write_options={"chunks": (2, 2, 5, 5)}) as out:
        for index in (0, 2, 3, 5, 1, 4):
            out.write_block(index, data[index].astype(np.float32) * 2)
        with pytest.raises(LayoutError, match="store of chunks, which cannot be mapped"):
            _ = out.array
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "w.zarr" / "0"), mode="r")[...],
                                  data.reshape(2, 3, 10, 12).astype(np.float32) * 2)
    with pytest.raises(FileFormatError, match=r"chunks: \(2, 3\) must be 3 positive sizes"):
        io.create(tmp_path / "d.zarr", (1, 6, 10, 12), "int16", write_options={"chunks": "2,3"}).__enter__()
    assert not (tmp_path / "d.zarr").exists()


def test_every_chunk_is_written_zeros_too(tmp_path):
    """Each chunk of every level is written as it comes, a chunk of zeros (the fill value) too: zarr's check for such
    chunks compared every byte of each (a fifth of a pyramid's time). Read back by zarr as NumPy's block means."""
    data = np.zeros((8, 16, 16), np.float32)
    data[4:] = np.arange(4 * 16 * 16, dtype=np.float32).reshape(4, 16, 16)
    with io.create(tmp_path / "p.ome.zarr", (1, 8, 16, 16), "float32",
                   write_options={"chunks": (4, 8, 8), "levels": 2}) as out:
        io.copy_into(data, out)
    group = zarr.open_group(str(tmp_path / "p.ome.zarr"), mode="r")
    for level, expected in enumerate((data, data.reshape(4, 2, 8, 2, 8, 2).mean(axis=(1, 3, 5)))):
        array = group[str(level)]
        np.testing.assert_allclose(array[...], expected, rtol=1e-6)
        chunks = [int(np.ceil(n / c)) for n, c in zip(array.shape, array.chunks)]
        assert array.nchunks_initialized == np.prod(chunks), (level, array.nchunks_initialized, chunks)


# ---------------------------------------------------------------------------------------------
# zarr and ome-zarr-py write, noa reads
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_noa_reads_ome_zarr_py_levels_with_their_scale(tmp_path, version):
    data = np.random.default_rng(2).integers(0, 1000, (3, 8, 12), dtype=np.uint16)
    _ome_zarr_py_write(tmp_path / "p.ome.zarr", data, "zyx", [0.2, 0.1, 0.1], "micrometer", version, levels=2)
    array, meta = io.read(tmp_path / "p.ome.zarr")
    np.testing.assert_array_equal(array.numpy(), data[None])
    assert meta.format == "omezarr" and meta.unit == "micrometer"
    assert meta.pixel_size == pytest.approx((0.2, 0.1, 0.1))
    assert f"NGFF {version}" in meta.axes
    level1, meta1 = io.read(tmp_path / "p.ome.zarr", level=1)
    np.testing.assert_array_equal(level1.numpy(), data[None, :, ::2, ::2])
    assert meta1.pixel_size == pytest.approx((0.2, 0.2, 0.2))
    probe = io.probe(tmp_path / "p.ome.zarr", level=1)
    assert probe.shape == (1, 3, 4, 6) and probe.dtype == np.uint16
    with pytest.raises(HeaderError, match=r"level: 2 is not in 0\.\.1"):
        io.read(tmp_path / "p.ome.zarr", level=2)
    # the voxel size reaches an MRC copy in ångström
    assert noa("copy", tmp_path / "p.ome.zarr", tmp_path / "p.mrc").returncode == 0
    with mrcfile.open(tmp_path / "p.mrc") as back:
        assert tuple(back.voxel_size.item()) == pytest.approx((1000.0, 1000.0, 2000.0))


def test_channels_and_time_map_to_bdhw_like_tiff(tmp_path):
    data = np.arange(2 * 3 * 4 * 5 * 6, dtype=np.float32).reshape(2, 3, 4, 5, 6)
    _ome_zarr_py_write(tmp_path / "tc.ome.zarr", data, "tczyx", [1, 1, 0.5, 0.5, 0.5], "nanometer")
    with pytest.raises(AxisMappingError, match=r"channel axis C \(3 channels\).*channel=N"):
        io.read(tmp_path / "tc.ome.zarr")
    array, meta = io.read(tmp_path / "tc.ome.zarr", channel=1)
    np.testing.assert_array_equal(array.numpy(), data[:, 1])
    assert meta.pixel_size == (0.5, 0.5, 0.5) and meta.unit == "nanometer"
    with pytest.raises(HeaderError, match=r"channel: 3 is not in 0\.\.2"):
        io.read(tmp_path / "tc.ome.zarr", channel=3)
    only_channels = data[0, :, 0]  # c, y, x: the channels are the batch
    _ome_zarr_py_write(tmp_path / "c.ome.zarr", only_channels, "cyx", [1, 0.5, 0.5], "nanometer")
    np.testing.assert_array_equal(io.read(tmp_path / "c.ome.zarr")[0].numpy(), only_channels[:, None])


def test_a_store_over_the_voxel_limit_is_refused_from_its_metadata_before_any_chunk(tmp_path, monkeypatch):
    """Under a voxel limit (a service's), the read checks it itself (``checks_size``) on the image it reads (one
    channel of several, when one is asked for): no chunk decoded over it, and the store not probed first."""
    data = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    _ome_zarr_py_write(tmp_path / "c.ome.zarr", data, "cyx", [1, 0.5, 0.5], "nanometer")
    assert omezarr.FORMAT.checks_size
    monkeypatch.setattr(omezarr.OmeZarrFormat, "probe", lambda *args: pytest.fail("probed"))
    with monkeypatch.context() as decoding:
        decoding.setattr(omezarr, "_decode", lambda *args, **kwargs: pytest.fail("decoded over the limit"))
        with limits.voxel_limit(data.size - 1), pytest.raises(
                LimitError, match=r"c\.ome\.zarr: shape \(3, 1, 4, 5\) has 60 voxels; the limit is 59$"):
            io.read(tmp_path / "c.ome.zarr")
    with limits.voxel_limit(data[1].size):
        np.testing.assert_array_equal(io.read(tmp_path / "c.ome.zarr", channel=1)[0].numpy().reshape(4, 5), data[1])


def test_a_bare_zarr_array_reads_with_a_notice(tmp_path):
    data = np.arange(60, dtype=">i4").reshape(3, 4, 5)  # big-endian: read in native order
    zarr.save_array(str(tmp_path / "bare.zarr"), data, zarr_format=2)
    array, meta = io.read(tmp_path / "bare.zarr")
    np.testing.assert_array_equal(array.numpy(), data[None])
    assert array.dtype == np.dtype("int32") and meta.pixel_size == (0.0, 0.0, 0.0)
    assert any("without OME metadata" in n for n in meta.notices)


def test_stores_that_are_not_images_are_refused_in_one_line(tmp_path):
    zarr.open_group(str(tmp_path / "g.zarr"), mode="w", zarr_format=2).attrs["plate"] = {"wells": []}
    with pytest.raises(HeaderError, match="an HCS plate"):
        io.read(tmp_path / "g.zarr")
    (tmp_path / "folder").mkdir()
    with pytest.raises(NotAFileError, match="folder: is a directory, neither a file nor a store"):
        io.read(tmp_path / "folder")
    (tmp_path / "f.zarr").write_bytes(b"not a store")
    with pytest.raises(FileFormatError, match="an OME-Zarr store is a directory"):
        io.read(tmp_path / "f.zarr")
    io.write(tmp_path / "v.ome.zarr", np.ones((2, 3), np.float32))
    with pytest.raises(FileFormatError, match="as_stack/as_volume: OME-Zarr axes name their meaning"):
        io.read(tmp_path / "v.ome.zarr", as_stack=True)


# ---------------------------------------------------------------------------------------------
# Atomic directory outputs
# ---------------------------------------------------------------------------------------------


def test_a_failed_write_leaves_no_store_and_no_temporary(tmp_path, monkeypatch):
    write = omezarr.StoreTiles.write

    def fail(self, key, buffer):
        write(self, key, buffer)  # a chunk is on disk in the temporary store, then the disk fails
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(omezarr.StoreTiles, "write", fail)
    with pytest.raises(RuntimeError, match="disk on fire"):
        io.write(tmp_path / "x.ome.zarr", np.ones((2, 3), np.float32))
    assert os.listdir(tmp_path) == []


def test_overwrite_replaces_a_store_and_only_a_store(tmp_path):
    io.write(tmp_path / "x.ome.zarr", np.ones((2, 3), np.float32))
    with pytest.raises(OutputExistsError):
        io.write(tmp_path / "x.ome.zarr", np.zeros((2, 3), np.float32))
    io.write(tmp_path / "x.ome.zarr", np.full((4, 5), 7, np.int16), overwrite=True)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "x.ome.zarr" / "0"), mode="r")[...],
                                  np.full((4, 5), 7, np.int16))
    assert sorted(os.listdir(tmp_path)) == ["x.ome.zarr"]
    (tmp_path / "photos.zarr").mkdir()
    (tmp_path / "photos.zarr" / "keep.jpg").write_text("precious")
    with pytest.raises(NotAFileError, match="is a directory that is not a zarr store"):
        io.write(tmp_path / "photos.zarr", np.ones((2, 3), np.float32), overwrite=True)
    assert (tmp_path / "photos.zarr" / "keep.jpg").read_text() == "precious"


def test_without_renameat2_the_replacement_falls_back(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "_RENAMEAT2", None)
    io.write(tmp_path / "x.zarr", np.ones((2, 3), np.float32))
    io.write(tmp_path / "x.zarr", np.full((2, 3), 2, np.float32), overwrite=True)
    np.testing.assert_array_equal(io.read(tmp_path / "x.zarr")[0].numpy(), np.full((1, 1, 2, 3), 2))
    assert sorted(os.listdir(tmp_path)) == ["x.zarr"]


def test_an_abandoned_temporary_store_is_removed_by_the_next_writer(tmp_path):
    old = tmp_path / ".x.ome.zarr.abc123-d.noa-tmp"
    (old / "0").mkdir(parents=True)
    (old / "0" / "0.0").write_bytes(b"chunk")
    past = time.time() - 2 * atomic.ABANDONED_AFTER_S
    os.utime(old, (past, past))
    atomic._LISTED.clear()
    io.write(tmp_path / "x.ome.zarr", np.ones((2, 3), np.float32))
    assert sorted(os.listdir(tmp_path)) == ["x.ome.zarr"]


def test_registry_keeps_stores_apart_from_files():
    assert omezarr.FORMAT not in formats.FORMATS and formats.by_name("omezarr") is omezarr.FORMAT
    from pathlib import Path

    assert formats.output_format(Path("a.OME.ZARR")) is omezarr.FORMAT
    assert formats.output_format(Path("a.zarr")) is omezarr.FORMAT
    assert formats.strip_image_suffix("b.ome.zarr") == "b"
    with pytest.raises(Exception, match=r"nor a store \(\.ome\.zarr \.zarr\)"):
        formats.output_format(Path("x.png"))


# ---------------------------------------------------------------------------------------------
# CLI and HTTP
# ---------------------------------------------------------------------------------------------


def test_cli_operations_take_and_give_stores(tmp_path):
    data = write_mrc(tmp_path / "s.mrcs", np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5), stack=True)
    assert noa("copy", tmp_path / "s.mrcs", tmp_path / "s.ome.zarr").returncode == 0
    info = noa("info", tmp_path / "s.ome.zarr")
    assert info.returncode == 0 and "omezarr" in info.stdout and "image stack" in info.stdout
    flipped = noa("flip", tmp_path / "s.ome.zarr", tmp_path / "f.ome.zarr", "--axis", "x")
    assert flipped.returncode == 0, flipped.stderr
    np.testing.assert_array_equal(_ome_zarr_py_read(tmp_path / "f.ome.zarr")[0], data[:, :, ::-1])
    assert_user_error(noa("info", tmp_path / "s.ome.zarr", "--level", "3"), "level: 3 is not in 0..0")
    assert_user_error(noa("copy", tmp_path / "s.mrcs", tmp_path / "s.ome.zarr"), "exists")
    assert_user_error(noa("info", tmp_path / "s.ome.zarr", "--series", "1"), "series")
    # the output's chunks and NGFF version, on any writing command
    chunked = noa("bin", tmp_path / "s.mrcs", tmp_path / "b.ome.zarr", "--factor", "1", "--chunks", "2,3,2",
                  "--ngff", "0.5")
    assert chunked.returncode == 0, chunked.stderr
    array = zarr.open_array(str(tmp_path / "b.ome.zarr" / "0"), mode="r")
    assert (array.chunks, array.metadata.zarr_format) == ((2, 3, 2), 3)
    np.testing.assert_array_equal(array[...], data)
    assert_user_error(noa("copy", tmp_path / "s.mrcs", tmp_path / "c.mrc", "--chunks", "2,3,2"),
                      "chunks: MRC files are not chunked; --chunks is for OME-Zarr outputs")
    assert_user_error(noa("copy", tmp_path / "s.mrcs", tmp_path / "c.ome.zarr", "--chunks", "2,3"),
                      "chunks: (2, 3) must be 3 positive sizes, one per stored axis ('t', 'y', 'x')")
    assert not (tmp_path / "c.mrc").exists() and not (tmp_path / "c.ome.zarr").exists()


def test_http_paths_mode_reads_and_writes_stores_and_uploads_refuse_them(tmp_path):
    from fastapi.testclient import TestClient

    from noa_server.app import create_app
    from noa_server.settings import Settings

    root = tmp_path / "root"
    root.mkdir()
    data = np.arange(20, dtype=np.float32).reshape(4, 5)
    io.write(root / "in.ome.zarr", data)
    with TestClient(create_app(Settings(warmup=False, data_root=root))) as client:
        written = client.post("/v1/paths/copy", json={"src": "in.ome.zarr", "dst": "out.ome.zarr",
                                                      "chunks": [2, 3], "ngff": "0.5"})
        assert written.status_code == 201, written.text
        np.testing.assert_array_equal(io.read(root / "out.ome.zarr")[0].numpy(), data[None, None])
        assert zarr.open_array(str(root / "out.ome.zarr" / "0"), mode="r").chunks == (2, 3)
        bad = client.post("/v1/paths/copy", json={"src": "in.ome.zarr", "dst": "bad.ome.zarr", "chunks": [0, 3]})
        assert "chunks.0: Input should be greater than or equal to 1" in assert_problem(bad, 400)["detail"]
        info = client.post("/v1/paths/info", json={"path": "out.ome.zarr"})
        assert info.status_code == 200 and info.json()["format"] == "omezarr", info.text
        # a store is a directory, not one file: uploads neither send nor receive one
        write_mrc(root / "in.mrc", data)
        refused = client.post("/v1/upload/copy", data={"format": "omezarr"},
                              files={"file": ("in.mrc", (root / "in.mrc").read_bytes())})
        assert "'mrc' or 'tiff'" in assert_problem(refused, 400, "invalid-parameters")["detail"]
        zipped = client.post("/v1/upload/copy", files={"file": ("in.zip", b"PK\x03\x04" + b"\0" * 100)})
        assert "a zip archive; an OME-Zarr store is read as its directory" in assert_problem(zipped, 422)["detail"]


@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=2, max_size=4), data=st.data(),
       zarr_format=st.sampled_from([2, 3]), fortran=st.booleans(), big_endian=st.booleans(), in_memory=st.booleans())
def test_noa_reads_any_chunking_zarr_writes(tmp_path_factory, shape, data, zarr_format, fortran, big_endian, in_memory):
    """Stores written by zarr itself with random chunks (F-ordered chunks and big-endian data in zarr v2):
    values as zarr reads them, in BDHW; decoded into a mapped file, or into memory (mmap=False)."""
    folder = tmp_path_factory.mktemp("r")
    chunks = tuple(data.draw(st.integers(1, n)) for n in shape)
    names = "tzyx"[4 - len(shape):]
    dtype = np.dtype(">f4" if big_endian and zarr_format == 2 else "<f4")
    values = np.random.default_rng(len(shape)).random(shape).astype(dtype)
    group = zarr.open_group(str(folder / "z.zarr"), mode="w", zarr_format=zarr_format)
    extra = {"order": "F"} if fortran and zarr_format == 2 else {}
    group.create_array("s0", shape=shape, chunks=chunks, dtype=dtype, **extra)[...] = values
    axes = [{"name": a, "type": "time" if a == "t" else "space", **({"unit": "nanometer"} if a != "t" else {})}
            for a in names]
    scale = [1.0 if a == "t" else 0.25 for a in names]
    image = {"axes": axes,
             "datasets": [{"path": "s0", "coordinateTransformations": [{"type": "scale", "scale": scale}]}]}
    if zarr_format == 2:
        group.attrs["multiscales"] = [{"version": "0.4", **image}]
    else:
        group.attrs["ome"] = {"version": "0.5", "multiscales": [image]}
    array, meta = io.read(folder / "z.zarr", mmap=not in_memory)
    np.testing.assert_array_equal(array.numpy(), values.reshape((1,) * (4 - len(shape)) + tuple(shape)))
    assert array.dtype == np.dtype("float32")
    spatial = [a for a in names if a != "t"]
    expected = tuple(0.25 if a in spatial else 0.0 for a in "zyx")
    assert meta.pixel_size == expected and meta.unit == "nanometer"


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize("shape", [(1, 1, 3, 4), (3, 1, 3, 4), (1, 2, 3, 4), (2, 2, 1, 1)])
@pytest.mark.parametrize("pixel_size", [(0.0, 0.0, 0.0), (2.0, 1.0, 1.0)])
def test_noa_outputs_are_valid_ngff_by_ome_zarr_models(tmp_path, version, shape, pixel_size):
    """ome-zarr-models (pydantic models of the NGFF specifications) validates what noa writes."""
    models = pytest.importorskip(f"ome_zarr_models.v0{version[-1]}")
    meta = Metadata(format="mrc", shape=shape, dtype="float32", pixel_size=pixel_size, origin=(0.0, 1.0, 2.0))
    with io.create(tmp_path / "o.ome.zarr", shape, "uint16", meta, write_options={"ngff": version}) as out:
        io.copy_into(np.arange(np.prod(shape), dtype=np.uint16).reshape(shape), out)
    image = models.Image.from_zarr(zarr.open_group(str(tmp_path / "o.ome.zarr"), mode="r"))
    axes = image.attributes.multiscales[0].axes if version == "0.4" else image.ome_attributes.multiscales[0].axes
    assert [a.name for a in axes] == list(omezarr.stored_axes(shape)[1])


def test_damaged_stores_are_one_line_errors_and_leave_no_output(tmp_path):
    io.write(tmp_path / "v.ome.zarr", np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    chunk = next(p for p in (tmp_path / "v.ome.zarr" / "0").iterdir() if not p.name.startswith("."))
    chunk.write_bytes(b"garbage, not a Blosc frame")
    assert_user_error(noa("copy", tmp_path / "v.ome.zarr", tmp_path / "out.mrc"), "v.ome.zarr: chunk data:")
    assert not (tmp_path / "out.mrc").exists()
    (tmp_path / "v.ome.zarr" / ".zattrs").write_text("{not json")
    assert_user_error(noa("info", tmp_path / "v.ome.zarr"), "v.ome.zarr: zarr metadata:")
    (tmp_path / "v.ome.zarr" / ".zattrs").write_text(json.dumps({"multiscales": [{"version": "0.4", "axes": [
        "z", "y"], "datasets": [{"path": "../../etc"}]}]}))
    assert_user_error(noa("info", tmp_path / "v.ome.zarr"), "path '../../etc' is not inside the store")
    assert sorted(os.listdir(tmp_path)) == ["v.ome.zarr"]


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
def test_dask_splits_a_store_into_tasks_that_each_write_their_own_chunks(tmp_path):
    """One large store written by ome-zarr-py, through the Dask driver: its chunks are decoded by tasks
    into a shared temporary file, then tile tasks each write whole chunks of the output store. The
    result is the single-process one, and no temporary file is left."""
    pytest.importorskip("distributed")
    from noa_core import operations
    from noa_core.run import cluster, local

    data = np.random.default_rng(4).normal(0, 1, (40, 256, 320)).astype(np.float32)  # 12.5 MiB
    _ome_zarr_py_write(tmp_path / "in.ome.zarr", data, "zyx", [1.5, 2.5, 3.5], "angstrom", chunks=(5, 128, 160))
    task = operations.get("permute").task({"axes": (0, 1, 3, 2), "chunks": (4, 160, 256)})
    from distributed import get_task_stream

    with cluster.connect("local", workers=2) as client, get_task_stream(client) as stream:
        cluster.write_split(task, tmp_path / "in.ome.zarr", tmp_path / "out.ome.zarr", client,
                            block_bytes=cluster.MIN_BLOCK_BYTES)
    ran = [t["key"] for t in stream.data]
    assert sum(k.startswith("noa-decode-") for k in ran) >= 2  # 12.5 MiB decoded in blocks of 8 MiB at most
    assert sum(k.startswith("noa-permute-") for k in ran) >= 2  # tiles written by several tasks
    local.write(task, tmp_path / "in.ome.zarr", tmp_path / "ref.ome.zarr", overwrite=False)
    out = zarr.open_array(str(tmp_path / "out.ome.zarr" / "0"), mode="r")
    assert out.chunks == (4, 160, 256)
    np.testing.assert_array_equal(out[...], data.transpose(0, 2, 1))
    np.testing.assert_array_equal(out[...], zarr.open_array(str(tmp_path / "ref.ome.zarr" / "0"), mode="r")[...])
    assert io.read(tmp_path / "out.ome.zarr")[1].pixel_size == (1.5, 3.5, 2.5)
    # an MRC file into a store (and back): mapped inputs, tile tasks writing chunks
    write_mrc(tmp_path / "in.mrc", data)
    copy = operations.get("copy").task({"chunks": (3, 100, 320)})
    with cluster.connect("local", workers=2) as client, get_task_stream(client) as stream:
        cluster.write_split(copy, tmp_path / "in.mrc", tmp_path / "mrc.ome.zarr", client,
                            block_bytes=cluster.MIN_BLOCK_BYTES)
        cluster.write_split(operations.get("copy").task(), tmp_path / "mrc.ome.zarr", tmp_path / "back.mrc", client,
                            block_bytes=cluster.MIN_BLOCK_BYTES)
    assert sum(t["key"].startswith("noa-copy-") for t in stream.data) >= 4
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "mrc.ome.zarr" / "0"), mode="r")[...], data)
    with mrcfile.open(tmp_path / "back.mrc", permissive=False) as back:
        np.testing.assert_array_equal(back.data, data)
    assert sorted(os.listdir(tmp_path)) == ["back.mrc", "in.mrc", "in.ome.zarr", "mrc.ome.zarr", "out.ome.zarr",
                                            "ref.ome.zarr"]


def test_store_tiles_are_whole_chunks(tmp_path):
    """Tiles of a store output never share a chunk (a task writes a chunk whole, nothing read back)."""
    from noa_core import operations

    write_mrc(tmp_path / "v.mrc", np.zeros((30, 70, 90), np.float32))
    for chunks in [(7, 16, 32), (30, 90, 70), (1, 3, 70), (4, 100, 100)]:
        plan = operations.get("permute").task({"axes": (0, 1, 3, 2), "chunks": chunks}).plan(tmp_path / "v.mrc")
        with plan.create(tmp_path / "v.ome.zarr", overwrite=True) as writer:
            keys = plan.keys(writer, 64 << 10)
            assert writer.chunks == (1, *(min(c, n) for c, n in zip(chunks, (30, 90, 70))))
            covered = np.zeros(writer.shape, np.int8)
            for key in keys:
                covered[key] += 1
                for k, c, n in zip(key[1:], chunks, writer.shape[1:]):
                    assert k.start % c == 0 and (k.stop % c == 0 or k.stop == n), (key, chunks)
            assert (covered == 1).all()


# -- the promises every format keeps (tests/io/conformance.py) -----------------------------------


class TestOmeZarrConformance(FormatTests):
    format = omezarr.FORMAT

    def sample(self, folder: Path) -> tuple[Path, np.ndarray]:
        path = folder / "sample.ome.zarr"
        _ome_zarr_py_write(path, np.random.default_rng(5).random((3, 6, 5), dtype=np.float32), "zyx",
                           [1.0, 0.5, 0.5], "nanometer", chunks=(1, 6, 5))
        return path, _ome_zarr_py_read(path)[0][None]  # z, y, x: one volume

    def reference(self, path: Path) -> np.ndarray:
        return _ome_zarr_py_read(path)[0]

    def damage(self, path: Path) -> None:
        """Every chunk of the store cut in half (its metadata kept)."""
        chunks = [p for p in path.rglob("*") if p.is_file() and not p.name.startswith((".z", "zarr.json"))]
        assert chunks
        for chunk in chunks:
            data = chunk.read_bytes()
            chunk.write_bytes(data[:len(data) // 2])


# -- hostile stores ------------------------------------------------------------------------------------------------


BOMB_BYTES = 64 << 20  # what a bomb decodes to: far more than the chunks below hold (64 KiB)
PEAK_BYTES = 24 << 20  # what reading any store below may hold at once (an lzma decoder takes 9 MiB per chunk)


def _bare(path: Path, data: np.ndarray, chunks, zarr_format: int = 2, compressors="auto", **options) -> zarr.Array:
    """A bare zarr array (noa reads it as YX / ZYX) of ``data``, written by zarr itself."""
    array = zarr.create_array(store=str(path), shape=data.shape, chunks=chunks, dtype=data.dtype,
                              zarr_format=zarr_format, compressors=compressors, fill_value=0, **options)
    array[...] = data
    return array


def _image(path: Path, data: np.ndarray, chunks: str) -> None:
    """An OME-Zarr image (NGFF 0.4) of ``data`` with ``chunks``, written by noa."""
    with io.create(path, data.shape, data.dtype, write_options={"chunks": chunks}) as out:
        io.copy_into(data, out)


def _chunk(path: Path, zarr_format: int) -> Path:
    """The file of the first chunk of a bare 2-d array."""
    return path / ("0.0" if zarr_format == 2 else "c/0/0")


def _rle_zstd(nbytes: int, declare: bool) -> bytes:
    """A zstd frame of ``nbytes`` zeros in RLE blocks (4 bytes per 128 KiB), its size declared or not."""
    head = b"\x28\xb5\x2f\xfd" + (b"\xe0" + struct.pack("<Q", nbytes) if declare else b"\x00\x58")
    blocks = nbytes // (128 << 10)
    return head + b"".join(struct.pack("<I", (128 << 13) | 2 | (i == blocks - 1))[:3] + b"\0" for i in range(blocks))


def _peak_of(read) -> tuple[BaseException | None, int]:
    """The error ``read()`` raised (None if none) and the most memory Python held meanwhile."""
    tracemalloc.start()
    try:
        read()
        error = None
    except Exception as exc:
        error = exc
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return error, peak


# -- 7: a chunk that is a directory ---------------------------------------------------------------------


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_chunk_that_is_a_directory_is_refused_not_read_as_zeros(tmp_path, zarr_format):
    store = tmp_path / "s.zarr"
    _bare(store, np.arange(1, 65, dtype=np.float32).reshape(8, 8), (4, 4), zarr_format)
    chunk = _chunk(store, zarr_format)
    chunk.unlink()
    chunk.mkdir()
    with pytest.raises(CorruptFileError, match=r"chunk data: .*0[./]0: is a directory, not a file"):
        io.read(store)
    assert_user_error(noa("copy", store, tmp_path / "o.mrc"), "s.zarr: chunk data:", "is a directory")
    assert not (tmp_path / "o.mrc").exists()


# -- 8: links out of the store --------------------------------------------------------------------------


def test_links_inside_a_store_are_not_followed(tmp_path):
    """A chunk linked to another store's chunk, a level folder linked elsewhere, a chunk linked to /dev/zero."""
    data = np.arange(1, 65, dtype=np.float32).reshape(8, 8)
    secret = _bare(tmp_path / "secret.zarr", data * 1000, (4, 4))
    assert secret[0, 0] == 1000
    store = tmp_path / "s.zarr"
    _bare(store, data, (4, 4))
    (store / "0.0").unlink()
    (store / "0.0").symlink_to(tmp_path / "secret.zarr" / "0.0")
    with pytest.raises(CorruptFileError, match=r"0.0: is a symbolic link; noa follows no link inside a store"):
        io.read(store)
    (store / "0.0").unlink()
    (store / "0.0").symlink_to("/dev/zero")  # once grew without bound
    with pytest.raises(CorruptFileError, match="symbolic link"):
        io.read(store)

    image = tmp_path / "i.ome.zarr"
    io.write(image, data)
    os.rename(image / "0", tmp_path / "elsewhere")
    (image / "0").symlink_to(tmp_path / "elsewhere")
    assert_user_error(noa("copy", image, tmp_path / "o.mrc"), "i.ome.zarr: level 0: array", "(0: is a symbolic link")


def test_paths_mode_never_reads_a_store_chunk_linked_out_of_the_data_root(tmp_path):
    """`/v1/paths/copy` of a store whose chunk links to a file outside the root was a way to read it."""
    from fastapi.testclient import TestClient

    from noa_server.app import create_app
    from noa_server.settings import Settings

    root = tmp_path / "root"
    root.mkdir()
    data = np.arange(1, 65, dtype=np.float32).reshape(8, 8)
    _bare(tmp_path / "outside.zarr", data + 1e6, (4, 4))
    _image(root / "in.ome.zarr", data, "4,4")
    chunk = next(p for p in (root / "in.ome.zarr" / "0").iterdir() if not p.name.startswith("."))
    chunk.unlink()
    chunk.symlink_to(tmp_path / "outside.zarr" / "0.0")
    with TestClient(create_app(Settings(warmup=False, data_root=root)), raise_server_exceptions=False) as client:
        refused = client.post("/v1/paths/copy", json={"src": "in.ome.zarr", "dst": "out.mrc"})
        detail = assert_problem(refused, 422)["detail"]
        assert detail.startswith("in.ome.zarr: chunk data:") and "symbolic link" in detail, detail
        assert not (root / "out.mrc").exists() and str(tmp_path) not in detail


# -- 10: FIFOs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["0/0.0", "0/.zarray", ".zattrs"])
def test_a_fifo_in_a_store_is_refused_at_once(tmp_path, name):
    store = tmp_path / "f.ome.zarr"
    _image(store, np.ones((8, 8), np.float32), "4,4")
    (store / name).unlink()
    os.mkfifo(store / name)
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "noa_cli.main", "copy", str(store), str(tmp_path / "o.mrc")],
                            capture_output=True, text=True, cwd=REPO, timeout=120)  # it hung forever
    assert_user_error(result, "f.ome.zarr:", f"{name.rsplit('/', 1)[-1]}: is not a regular file")
    assert time.monotonic() - start < 60


def test_fifo_chunks_neither_block_the_workers_nor_the_shutdown(tmp_path):
    """Two requests on a store with a FIFO chunk once blocked both workers for good; SIGTERM then did
    not stop the server. Now each is refused at once, later requests are answered, SIGTERM stops it."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    root = tmp_path / "root"
    root.mkdir()
    _image(root / "f.ome.zarr", np.ones((8, 8), np.float32), "4,4")
    (root / "f.ome.zarr" / "0" / "0.0").unlink()
    os.mkfifo(root / "f.ome.zarr" / "0" / "0.0")
    write_mrc(root / "ok.mrc", np.ones((4, 4), np.float32))
    proc, url = start_server(root, tmp_path / "server.log", {"NOA_WORKERS": "2"})
    try:
        with httpx.Client(base_url=url, timeout=30) as client, ThreadPoolExecutor(2) as pool:
            copies = list(pool.map(lambda i: client.post("/v1/paths/copy", json={"src": "f.ome.zarr",
                                                                                  "dst": f"o{i}.mrc"}), range(2)))
            for response in copies:
                assert "0/0.0: is not a regular file" in assert_problem(response, 422)["detail"]
            assert client.post("/v1/paths/info", json={"path": "ok.mrc"}).status_code == 200
        proc.terminate()
        assert proc.wait(30) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


# -- 11: chunk-shape and decompression bombs ------------------------------------------------------------


def test_a_chunk_shape_far_larger_than_the_array_is_refused_before_any_read(tmp_path):
    """A 4x4 array with 32768x32768 chunks (one 52 KiB zstd chunk decoding to 1 GiB) took 1.1-2.4 GB to read."""
    store = tmp_path / "b.zarr"
    zarr.create_array(store=str(store), shape=(4, 4), chunks=(32768, 32768), dtype="uint8", zarr_format=2,
                      compressors=numcodecs.Zstd(), fill_value=0)
    (store / "0.0").write_bytes(_rle_zstd(32768 * 32768, declare=True))
    error, peak = _peak_of(lambda: io.read(store))
    assert isinstance(error, HeaderError) and "b.zarr: chunks: level 0 has chunks of (32768, 32768)" in str(error)
    assert peak < PEAK_BYTES
    assert_user_error(noa("copy", store, tmp_path / "o.mrc"), "b.zarr: chunks:", "(32768, 32768)")
    # a chunk larger than the array within reason is read (zarr pads edge chunks): 8x8 in 16x16 chunks
    small = tmp_path / "small.zarr"
    data = np.arange(64, dtype=np.uint16).reshape(8, 8)
    _bare(small, data, (16, 16))
    np.testing.assert_array_equal(io.read(small)[0].numpy()[0, 0], data)


def test_a_store_over_the_voxel_limit_with_bomb_chunks_is_refused_over_http(tmp_path):
    from fastapi.testclient import TestClient

    from noa_server.app import create_app
    from noa_server.settings import Settings

    root = tmp_path / "root"
    root.mkdir()
    zarr.create_array(store=str(root / "b.zarr"), shape=(4, 4), chunks=(32768, 32768), dtype="uint8",
                      zarr_format=2, compressors=numcodecs.Zstd(), fill_value=0)
    (root / "b.zarr" / "0.0").write_bytes(_rle_zstd(32768 * 32768, declare=True))
    app = create_app(Settings(warmup=False, data_root=root, max_voxels=1_000_000))
    with TestClient(app, raise_server_exceptions=False) as c:
        detail = assert_problem(c.post("/v1/paths/copy", json={"src": "b.zarr", "dst": "o.mrc"}), 422)["detail"]
    assert detail.startswith("b.zarr: chunks: level 0 has chunks of (32768, 32768)"), detail


def _codecs(zarr_format: int):
    """(name, zarr compressors, what the stored bytes of a chunk of ``n`` bytes of zeros are) per codec."""
    def numcodec(codec):
        return lambda n: codec.encode(np.zeros(n, np.uint8))

    if zarr_format == 2:
        return [("zstd", numcodecs.Zstd(), lambda n: _rle_zstd(n, declare=True)),
                ("zstd-undeclared", numcodecs.Zstd(), lambda n: _rle_zstd(n, declare=False)),
                ("blosc", numcodecs.Blosc(cname="zstd", clevel=9), numcodec(numcodecs.Blosc(cname="zstd", clevel=9))),
                # lz4 expands 255:1 at most, but numcodecs allocates what the 4-byte size header says
                ("lz4", numcodecs.LZ4(), lambda n: struct.pack("<I", n) + numcodecs.LZ4().encode(bytes(1 << 20))[4:]),
                ("zlib", numcodecs.Zlib(), lambda n: zlib.compress(bytes(n), 9)),
                ("gzip", numcodecs.GZip(), numcodec(numcodecs.GZip(9))),
                ("bz2", numcodecs.BZ2(), lambda n: bz2.compress(bytes(n))),
                ("lzma", numcodecs.LZMA(), lambda n: lzma.compress(bytes(n)))]
    from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

    return [("zstd", ZstdCodec(), lambda n: _rle_zstd(n, declare=True)),
            ("blosc", BloscCodec(cname="zstd"), numcodec(numcodecs.Blosc(cname="zstd", clevel=9))),
            ("gzip", GzipCodec(), numcodec(numcodecs.GZip(9)))]


CODECS = [(2, name) for name, _, _ in _codecs(2)] + [(3, name) for name, _, _ in _codecs(3)]


@pytest.mark.parametrize("zarr_format, codec", CODECS)
def test_a_compressed_chunk_never_decodes_past_what_its_chunk_holds(tmp_path, zarr_format, codec):
    """A 256x256 uint8 chunk (64 KiB) whose compressed bytes (well under the chunk's size) decode to
    64 MiB: refused, and reading never holds more than a few MiB. The same store with real data reads
    as zarr reads it."""
    _name, compressors, bomb = next(c for c in _codecs(zarr_format) if c[0] == codec)
    store = tmp_path / "z.zarr"
    data = np.random.default_rng(1).integers(0, 200, (256, 512), dtype=np.uint8)
    data[:, 256:] = 7  # one chunk of noise, one that compresses well
    _bare(store, data, (256, 256), zarr_format, compressors=[compressors] if zarr_format == 3 else compressors)
    if codec != "zstd-undeclared":
        np.testing.assert_array_equal(io.read(store)[0].numpy()[0, 0], data)
    payload = bomb(BOMB_BYTES)
    assert len(payload) < 256 * 256  # smaller than the chunk: no size check on the file can catch it
    _chunk(store, zarr_format).write_bytes(payload)
    error, peak = _peak_of(lambda: io.read(store))
    assert isinstance(error, CorruptFileError) and "z.zarr: chunk data:" in str(error), error
    assert peak < PEAK_BYTES, peak


def test_a_sharded_store_reads_and_its_inner_chunks_are_bounded(tmp_path):
    """NGFF 0.5 stores may be sharded: inner chunks are decoded by the same bounded steps."""
    from zarr.codecs import GzipCodec

    store = tmp_path / "s.zarr"
    data = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    _bare(store, data, (16, 16), 3, compressors=[GzipCodec()], shards=(32, 32))
    np.testing.assert_array_equal(io.read(store)[0].numpy()[0, 0], data)
    shard = store / "c" / "0" / "0"
    inner = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = inner.compress(bytes(BOMB_BYTES)) + inner.flush()
    count = 4  # inner chunks per shard; the index (offset, length per chunk, then crc32c) at the end
    index = b"".join(struct.pack("<QQ", 0, len(bomb)) for _ in range(count))
    import google_crc32c  # zarr's own dependency for the index checksum

    shard.write_bytes(bomb + index + struct.pack("<I", google_crc32c.value(index)))
    error, peak = _peak_of(lambda: io.read(store))
    assert isinstance(error, CorruptFileError) and "chunk data:" in str(error), error
    assert peak < PEAK_BYTES, peak


def test_a_chunk_file_larger_than_its_chunk_can_need_is_not_read(tmp_path):
    store = tmp_path / "z.zarr"
    _bare(store, np.ones((4, 4), np.uint8), (4, 4), compressors=None)
    with open(store / "0.0", "wb") as f:
        f.truncate(1 << 30)  # sparse: costs no disk
    error, peak = _peak_of(lambda: io.read(store))
    assert isinstance(error, CorruptFileError) and "0.0: 1073741824 bytes, more than a chunk" in str(error), error
    assert peak < PEAK_BYTES


# -- 14: outputs: chunk count and room ------------------------------------------------------------------


def test_chunks_that_would_make_too_many_files_are_refused_before_any(tmp_path):
    source = write_mrc(tmp_path / "in.mrc", np.zeros((1025, 1000), np.float32))
    with (pytest.raises(ParameterError, match=r"chunks: .*o.ome.zarr: chunks of \(1, 1\) cut the stored shape "
                                              r"\(1025, 1000\) into 1025000 chunk files") as caught,
          io.create(tmp_path / "o.ome.zarr", (1, 1, 1025, 1000), np.float32, write_options={"chunks": "1,1"})):
        pass
    assert caught.value.param == "chunks"
    assert_user_error(noa("copy", tmp_path / "in.mrc", tmp_path / "o.ome.zarr", "--chunks", "1,1"),
                      "--chunks:", "1025000 chunk files")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mrc"]
    assert source.shape == (1025, 1000)


def test_a_store_that_cannot_fit_is_refused_before_any_chunk_is_written(tmp_path, monkeypatch):
    """4 TiB asked for: refused at once, naming the output (not its hidden temporary), nothing left."""
    with (pytest.raises(NoSpaceError, match=r"^\S*big.ome.zarr: shape: the store of \(1048576, 1048576\) float32"),
          io.create(tmp_path / "big.ome.zarr", (1, 1, 1 << 20, 1 << 20), np.float32)):
        pass
    assert list(tmp_path.iterdir()) == []
    write_mrc(tmp_path / "in.mrc", np.zeros((4, 4), np.float32))
    assert_user_error(noa("resize", tmp_path / "in.mrc", tmp_path / "r.ome.zarr", "--shape", "1000,100000,100000",
                          "--fill", "zero"), "r.ome.zarr: shape:", "bytes free")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mrc"]

    # a small file system: room for the data compressed, not for the chunks uncompressed
    real = os.statvfs

    class Small:
        def __init__(self, stat):
            self.f_frsize, self.f_bavail = stat.f_frsize, (1 << 20) // stat.f_frsize

    monkeypatch.setattr(os, "statvfs", lambda p: Small(real(p)))
    with (pytest.raises(NoSpaceError, match=r"small.ome.zarr: shape: .* may need 1118208 bytes "
                                             r"\(1 chunks of \(4, 256, 256\), uncompressed\)"),
          io.create(tmp_path / "small.ome.zarr", (1, 4, 256, 256), np.float32)):
        pass


# -- 15b: the decoded copy of a store -------------------------------------------------------------------


def test_the_decoded_copy_of_a_store_has_no_name_while_it_is_written(tmp_path, monkeypatch):
    """A copy killed while decoding left a 1 GiB `noa-*.zarr-decoded` in $TMPDIR: it is unlinked from the start."""
    spill = tmp_path / "tmp"
    spill.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill))
    store = tmp_path / "s.ome.zarr"
    data = np.arange(64 * 64, dtype=np.float32).reshape(4, 16, 64)
    _image(store, data, "1,16,64")
    seen = []
    decode_into = omezarr._decode_into

    def watching(*args):
        seen.append(sorted(os.listdir(spill)))  # what a kill at this moment would leave
        return decode_into(*args)

    monkeypatch.setattr(omezarr, "_decode_into", watching)
    array, _ = io.read(store)
    assert seen == [[]]
    np.testing.assert_array_equal(array.numpy()[0], data)
    assert os.listdir(spill) == []


def test_a_zstd_chunk_that_declares_no_size_reads_within_its_bound(tmp_path):
    """Streaming zstd encoders leave out the decoded size: such a chunk is decoded into a buffer of the most
    its chunk may hold (it was refused outright, making those stores unreadable)."""
    store = tmp_path / "z.zarr"
    data = np.random.default_rng(1).integers(0, 200, (256, 1024), dtype=np.uint8)
    _bare(store, data, (256, 512), 2, compressors=numcodecs.Zstd())
    _chunk(store, 2).write_bytes(_rle_zstd(256 * 512, declare=False))  # the first chunk: zeros, size undeclared
    expected = data.copy()
    expected[:, :512] = 0
    np.testing.assert_array_equal(io.read(store)[0].numpy()[0, 0], expected)


# ---------------------------------------------------------------------------------------------
# Pyramids (issue 46, item 1): every level from one read of the input
# ---------------------------------------------------------------------------------------------


def _halved_oracle(above: np.ndarray, axes: tuple[int, ...], downsample: str) -> np.ndarray:
    """A level from the one above, by NumPy: the mean of each 2x2(x2) box of ``axes`` (an odd size's last box
    the mean of the values it has), rounded half to even for integers, or the box's first value (nearest)."""
    if downsample == "nearest":
        return above[tuple(slice(None, None, 2) if i in axes else slice(None) for i in range(above.ndim))]
    sums, counts = above.astype(np.float64), np.ones(above.shape)
    for axis in axes:
        starts = np.arange(0, above.shape[axis], 2)
        sums, counts = np.add.reduceat(sums, starts, axis), np.add.reduceat(counts, starts, axis)
    mean = sums / counts
    return (np.rint(mean) if above.dtype.kind in "iu" else mean).astype(above.dtype)


def _levels_by_readers(path: Path) -> tuple[list[np.ndarray], list[np.ndarray], dict]:
    """Every level as ome-zarr-py's Reader and as zarr read it, and the multiscale image's metadata."""
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    node = next(iter(Reader(parse_url(str(path)))()))
    group = zarr.open_group(str(path), mode="r")
    attrs = group.attrs.asdict()
    image = (attrs["ome"]["multiscales"] if "ome" in attrs else attrs["multiscales"])[0]
    by_zarr = [group[d["path"]][...] for d in image["datasets"]]
    return [np.asarray(level) for level in node.data], by_zarr, image


class TestPyramids:
    @pytest.mark.parametrize("version", ["0.4", "0.5"])
    @pytest.mark.parametrize("shape, dtype, downsample, halved", [
        ((1, 20, 24, 32), "float32", "mean", (0, 1, 2)),     # a volume: z, y and x halved
        ((1, 9, 13, 11), "uint16", "mean", (0, 1, 2)),       # odd sizes: partial edge boxes, integers rounded
        ((4, 1, 15, 18), "int8", "mean", (1, 2)),            # a stack: every section at every level
        ((2, 3, 10, 9), "float64", "mean", (2, 3)),          # volumes in a batch (tilt series): t and z kept
        ((1, 7, 13, 10), "uint8", "nearest", (0, 1, 2)),     # labels: the top-left value
        ((1, 1, 17, 40), "float16", "mean", (0, 1)),         # one image
    ])
    def test_every_level_read_by_ome_zarr_py_and_zarr_is_the_numpy_mean_of_the_one_above(
            self, tmp_path, version, shape, dtype, downsample, halved):
        rng = np.random.default_rng(3)
        data = (rng.random(shape) * (100 if dtype.startswith(("u", "i")) else 1) - (50 if dtype == "int8" else 0)
                ).astype(dtype)
        with io.create(tmp_path / "p.ome.zarr", shape, dtype, None, write_options={
                "ngff": version, "levels": 3, "downsample": downsample, "chunks": None}) as out:
            io.copy_into(data, out)
        by_ome_zarr_py, by_zarr, _ = _levels_by_readers(tmp_path / "p.ome.zarr")
        stored = data.reshape(omezarr.stored_axes(shape)[0])
        expected = [stored]
        for _ in range(2):
            expected.append(_halved_oracle(expected[-1], halved, downsample))
        assert len(by_ome_zarr_py) == len(by_zarr) == 3
        for level, want in enumerate(expected):
            assert by_zarr[level].dtype == np.dtype(dtype)
            np.testing.assert_array_equal(by_ome_zarr_py[level], by_zarr[level])
            if dtype.startswith("float"):
                np.testing.assert_allclose(by_zarr[level], want, rtol=1e-3 if dtype == "float16" else 1e-6)
            else:
                np.testing.assert_array_equal(by_zarr[level], want)
        # reading level 2 gives level 2, in BDHW
        level2, _ = io.read(tmp_path / "p.ome.zarr", level=2)
        np.testing.assert_array_equal(level2.numpy().reshape(by_zarr[2].shape), by_zarr[2])

    def test_tiles_smaller_than_the_volume_write_each_level_once(self, tmp_path):
        """Many tiles (a small tile budget, user chunks not a power of two): the same levels as one tile."""
        data = np.random.default_rng(5).random((1, 70, 45, 37)).astype(np.float32)
        with io.create(tmp_path / "p.ome.zarr", data.shape, "float32", None,
                       write_options={"levels": 4, "chunks": "6,20,37"}) as out:
            assert out.chunks == (1, 24, 40, 37)  # lcm(6, 8) sections, lcm(20, 8) rows, whole rows
            io.copy_into(data, out, block_bytes=16 << 10)
        group = zarr.open_group(str(tmp_path / "p.ome.zarr"), mode="r")
        assert [group[str(k)].chunks for k in range(4)] == [(6, 20, 37), (6, 20, 19), (6, 10, 10), (3, 5, 5)]
        want = data[0]
        for level in range(4):
            np.testing.assert_allclose(group[str(level)][...], want, rtol=1e-6)
            want = _halved_oracle(want, (0, 1, 2), "mean")

    def test_a_volume_of_large_sections_is_tiled_in_bands_of_its_chunks(self, tmp_path):
        """16 sections of 4 MiB per chunk row band: tiles of one 16 MiB chunk, never 16 whole sections (64 MiB)."""
        from noa_core import operations

        write_mrc(tmp_path / "v.mrc", np.zeros((32, 1024, 1024), np.float32))
        plan = operations.get("copy").task({"levels": 5}).plan(tmp_path / "v.mrc")
        with plan.create(tmp_path / "v.ome.zarr", overwrite=False) as writer:
            keys = plan.keys(writer, 8 << 20)
            assert writer.chunks == (1, 16, 256, 1024)
            assert {tuple(k.stop - k.start for k in key) for key in keys} == {(1, 16, 256, 1024)}
            assert len(keys) == 8

    @pytest.mark.parametrize("version", ["0.4", "0.5"])
    def test_transforms_scale_by_two_and_move_by_half_a_pixel_in_angstrom(self, tmp_path, version):
        meta = Metadata(format="mrc", shape=(1, 8, 8, 8), dtype="float32", pixel_size=(3.0, 2.0, 1.0),
                        origin=(10.0, 20.0, 30.0))
        with io.create(tmp_path / "p.ome.zarr", (1, 8, 8, 8), "float32", meta,
                       write_options={"ngff": version, "levels": 3}) as out:
            io.copy_into(np.zeros((1, 8, 8, 8), np.float32), out)
        _, _, image = _levels_by_readers(tmp_path / "p.ome.zarr")
        assert [a.get("unit") for a in image["axes"]] == ["angstrom"] * 3 and image["type"] == "mean"
        for level, dataset in enumerate(image["datasets"]):
            factor = 2 ** level
            scale, translation = dataset["coordinateTransformations"]
            assert scale == {"type": "scale", "scale": [3.0 * factor, 2.0 * factor, 1.0 * factor]}
            assert translation == {"type": "translation", "translation": [
                o + (factor - 1) / 2 * p for o, p in zip((10.0, 20.0, 30.0), (3.0, 2.0, 1.0))]}
        models = pytest.importorskip(f"ome_zarr_models.v0{version[-1]}")
        models.Image.from_zarr(zarr.open_group(str(tmp_path / "p.ome.zarr"), mode="r"))
        read = io.read(tmp_path / "p.ome.zarr", level=1)[1]
        assert (read.pixel_size, read.origin) == ((6.0, 4.0, 2.0), (11.5, 21.0, 30.5))

    @pytest.mark.parametrize("shape, levels", [((1, 1, 256, 256), 1), ((1, 1, 257, 100), 2), ((1, 1, 100, 1025), 4),
                                               ((3, 1, 600, 512), 3), ((1, 300, 200, 200), 1)])
    def test_pyramid_halves_until_height_and_width_fit_256(self, tmp_path, shape, levels):
        from noa_core.io.protocol import OutputSpec

        spec = OutputSpec(tmp_path / "p.ome.zarr", shape, np.dtype("uint8"), "C", None, None, {"pyramid": True})
        layout = omezarr.store_layout(spec)
        assert len(layout.shapes) == levels
        assert max(layout.shapes[-1][-2:]) <= 256 and (levels == 1 or max(layout.shapes[-2][-2:]) > 256)

    def test_levels_past_one_pixel_or_with_pyramid_are_refused(self, tmp_path):
        from noa_core.operations import spec

        assert spec.DOWNSAMPLE.type.values == omezarr.DOWNSAMPLING  # the doors offer what the store writes
        with (pytest.raises(ParameterError, match=r"levels: .*halving it leaves one pixel after 3 levels"),
              io.create(tmp_path / "p.ome.zarr", (4, 3), "float32", None, write_options={"levels": 4})):
            pass
        with (pytest.raises(ParameterError, match=r"levels: .* not both"),
              io.create(tmp_path / "p.ome.zarr", (4, 3), "float32", write_options={"levels": 2, "pyramid": True})):
            pass
        assert not (tmp_path / "p.ome.zarr").exists()

    def test_cli_copy_writes_levels_and_mrc_outputs_refuse_them(self, tmp_path):
        data = write_mrc(tmp_path / "v.mrc", np.random.default_rng(2).random((12, 20, 18), dtype=np.float32),
                         voxel_size=(1.0, 2.0, 4.0))  # x, y, z
        done = noa("copy", tmp_path / "v.mrc", tmp_path / "v.ome.zarr", "--levels", "3")
        assert done.returncode == 0, done.stderr
        by_ome_zarr_py, by_zarr, _ = _levels_by_readers(tmp_path / "v.ome.zarr")
        assert [a.shape for a in by_ome_zarr_py] == [(12, 20, 18), (6, 10, 9), (3, 5, 5)]
        np.testing.assert_allclose(by_zarr[2], _halved_oracle(_halved_oracle(data, (0, 1, 2), "mean"),
                                                              (0, 1, 2), "mean"), rtol=1e-6)
        # level 2 read by noa, and level 0 back to MRC with the voxel size and origin it had
        info = noa("info", tmp_path / "v.ome.zarr", "--level", "2")
        assert info.returncode == 0, info.stderr
        assert "1, 3, 5, 5" in info.stdout and "16, 8, 4 Å" in info.stdout and "6, 3, 1.5" in info.stdout, info.stdout
        assert noa("copy", tmp_path / "v.ome.zarr", tmp_path / "back.mrc").returncode == 0
        with mrcfile.open(tmp_path / "back.mrc") as back:
            np.testing.assert_array_equal(back.data, data)
            assert back.voxel_size.item() == (1.0, 2.0, 4.0)
        for option in (["--levels", "2"], ["--pyramid"], ["--downsample", "nearest"]):
            assert_user_error(noa("copy", tmp_path / "v.mrc", tmp_path / "c.mrc", *option),
                              f"{option[0][2:]}: MRC files hold one level, no pyramid; {option[0]} is for OME-Zarr")
        assert not (tmp_path / "c.mrc").exists()

    def test_http_paths_mode_writes_a_pyramid(self, tmp_path):
        from fastapi.testclient import TestClient

        from noa_server.app import create_app
        from noa_server.settings import Settings

        root = tmp_path / "root"
        root.mkdir()
        data = write_mrc(root / "in.mrc", np.arange(4 * 9 * 10, dtype=np.float32).reshape(4, 9, 10), stack=True)
        with TestClient(create_app(Settings(warmup=False, data_root=root))) as client:
            written = client.post("/v1/paths/copy", json={"src": "in.mrc", "dst": "out.ome.zarr", "levels": 2,
                                                          "downsample": "nearest", "ngff": "0.5"})
            assert written.status_code == 201, written.text
            refused = client.post("/v1/paths/copy", json={"src": "in.mrc", "dst": "out.mrc", "pyramid": True})
            assert "out.mrc: pyramid: MRC files hold one level" in assert_problem(refused, 422)["detail"]
        by_ome_zarr_py, _, image = _levels_by_readers(root / "out.ome.zarr")
        assert image["type"] == "nearest"
        np.testing.assert_array_equal(by_ome_zarr_py[1], data[:, ::2, ::2])
        assert not (root / "out.mrc").exists()

    def test_dask_tasks_each_write_their_tiles_of_every_level(self, tmp_path):
        pytest.importorskip("distributed")
        from distributed import get_task_stream

        from noa_core import operations
        from noa_core.run import cluster

        data = np.random.default_rng(6).integers(0, 60000, (40, 384, 320)).astype(np.uint16)  # 9.4 MiB
        write_mrc(tmp_path / "in.mrc", data)
        task = operations.get("copy").task({"levels": 3, "chunks": (4, 384, 320)})
        with cluster.connect("local", workers=2) as client, get_task_stream(client) as stream:
            cluster.write_split(task, tmp_path / "in.mrc", tmp_path / "out.ome.zarr", client,
                                block_bytes=cluster.MIN_BLOCK_BYTES)
        assert sum(t["key"].startswith("noa-copy-") for t in stream.data) >= 2
        _, by_zarr, _ = _levels_by_readers(tmp_path / "out.ome.zarr")
        want = data
        for level in by_zarr:
            np.testing.assert_array_equal(level, want)
            want = _halved_oracle(want, (0, 1, 2), "mean")

    def test_sections_written_across_a_pyramid_block_are_refused(self, tmp_path):
        with (pytest.raises(LayoutError, match="cuts the pyramid's blocks of 2 pixels along depth"),
              io.create(tmp_path / "p.ome.zarr", (1, 4, 3, 3), "float32", None, write_options={"levels": 2}) as out):
            out.write_block(0, np.zeros((3, 3, 3), np.float32))
        assert not (tmp_path / "p.ome.zarr").exists()


# -- shards: OME-Zarr 0.5 chunks stored in shard files (zarr v3 sharding) ----------------------------------------------


def _sharding(array: zarr.Array) -> dict:
    """The sharding codec's configuration in the array's zarr.json, as zarr reads it."""
    codecs = array.metadata.to_dict()["codecs"]
    assert [c["name"] for c in codecs] == ["sharding_indexed"], codecs
    return codecs[0]["configuration"]


class TestShards:
    @pytest.mark.parametrize("levels", [1, 3])
    def test_shards_hold_the_chunks_and_every_reader_reads_the_values(self, tmp_path, levels):
        data = write_mrc(tmp_path / "v.mrc", np.random.default_rng(8).random((20, 30, 37), dtype=np.float32),
                         voxel_size=(1.0, 2.0, 4.0))
        done = noa("copy", tmp_path / "v.mrc", tmp_path / "v.ome.zarr", "--ngff", "0.5", "--shards", "4,16,16",
                   "--chunks", "2,8,8", "--levels", levels)
        assert done.returncode == 0, done.stderr
        group = zarr.open_group(str(tmp_path / "v.ome.zarr"), mode="r")
        # level k's shards and chunks are level 0's halved along z, y, x (chunks no smaller than the tiles need)
        want_shards = [(4, 16, 16), (2, 8, 8), (1, 4, 4)][:levels]
        want_chunks = [(2, 8, 8), (2, 8, 8), (1, 4, 4)][:levels]
        for level, (shards, chunks) in enumerate(zip(want_shards, want_chunks)):
            array = zarr.open_array(str(tmp_path / "v.ome.zarr" / str(level)), mode="r")
            assert (array.shards, array.chunks) == (shards, chunks)
            assert tuple(_sharding(array)["chunk_shape"]) == chunks
            assert array.metadata.chunk_grid.chunk_shape == shards  # the files: one per shard
        files = [p for p in (tmp_path / "v.ome.zarr" / "0" / "c").rglob("*") if p.is_file()]
        assert len(files) == 5 * 2 * 3  # ceil(20/4) x ceil(30/16) x ceil(37/16) shards
        by_ome_zarr_py, by_zarr, _ = _levels_by_readers(tmp_path / "v.ome.zarr")
        want = data
        for level in range(levels):
            np.testing.assert_array_equal(by_ome_zarr_py[level], by_zarr[level])
            np.testing.assert_allclose(by_zarr[level], want, rtol=1e-6)
            want = _halved_oracle(want, (0, 1, 2), "mean")
        assert len(by_zarr) == len(group) == levels
        assert noa("copy", tmp_path / "v.ome.zarr", tmp_path / "back.mrc").returncode == 0
        with mrcfile.open(tmp_path / "back.mrc") as back:
            np.testing.assert_array_equal(back.data, data)
            assert back.voxel_size.item() == (1.0, 2.0, 4.0)

    def test_default_chunks_divide_the_shards_and_tiles_are_whole_shards_of_every_level(self, tmp_path):
        from noa_core import operations
        from noa_core.io.protocol import OutputSpec

        def layout(shape, shards, **options):
            return omezarr.store_layout(OutputSpec(tmp_path / "p.ome.zarr", shape, np.dtype("float32"), "C", None,
                                                   None, {"ngff": "0.5", "shards": shards, **options}))

        # whole rows up to 1 MiB: 262 rows of 4000 bytes, cut to 250 to divide the shard's 1000
        assert layout((1, 4, 2000, 2000), (2, 1000, 1000)).chunks == [(1, 250, 1000)]
        # a shard past its axis is cut to the whole chunks that fit in it: 3 x 262 of 900 rows
        assert layout((1, 4, 900, 2000), (2, 1000, 1000)).shards == [(2, 786, 1000)]
        pyramid = layout((1, 64, 128, 96), (16, 64, 32), levels=3)
        assert pyramid.shards == [(16, 64, 32), (8, 32, 16), (4, 16, 8)]
        assert pyramid.grid == (1, 16, 64, 32)
        write_mrc(tmp_path / "v.mrc", np.zeros((30, 70, 90), np.float32))
        plan = operations.get("permute").task({"axes": (0, 1, 3, 2), "ngff": "0.5", "chunks": (2, 6, 10),
                                               "shards": (4, 24, 20), "levels": 2}).plan(tmp_path / "v.mrc")
        with plan.create(tmp_path / "v.ome.zarr", overwrite=True) as writer:
            keys = plan.keys(writer, 64 << 10)
            assert writer.chunks == (1, 4, 24, 20)
            covered = np.zeros(writer.shape, np.int8)
            for key in keys:
                covered[key] += 1
                for k, s, n in zip(key[1:], (4, 24, 20), writer.shape[1:]):
                    assert k.start % s == 0 and (k.stop % s == 0 or k.stop == n), key
            assert (covered == 1).all() and len(keys) > 1

    def test_dask_tasks_write_the_same_shards_as_one_process(self, tmp_path):
        pytest.importorskip("distributed")
        from distributed import get_task_stream

        from noa_core import operations
        from noa_core.run import cluster, local

        data = np.random.default_rng(9).integers(0, 60000, (40, 384, 320)).astype(np.uint16)  # 9.4 MiB
        write_mrc(tmp_path / "in.mrc", data)
        task = operations.get("copy").task({"levels": 3, "ngff": "0.5", "shards": (8, 128, 320),
                                            "chunks": (4, 64, 160)})
        with cluster.connect("local", workers=2) as client, get_task_stream(client) as stream:
            cluster.write_split(task, tmp_path / "in.mrc", tmp_path / "out.ome.zarr", client,
                                block_bytes=cluster.MIN_BLOCK_BYTES)
        assert sum(t["key"].startswith("noa-copy-") for t in stream.data) >= 2
        local.write(task, tmp_path / "in.mrc", tmp_path / "ref.ome.zarr", overwrite=False)

        def files(root: Path) -> dict[str, bytes]:
            """Every level's files (its zarr.json and shards); the group's names the store and the command."""
            return {str(p.relative_to(root)): p.read_bytes() for p in root.glob("*/**/*") if p.is_file()}

        written = files(tmp_path / "out.ome.zarr")
        assert written == files(tmp_path / "ref.ome.zarr")
        assert sum(name.startswith("0/c/") for name in written) == 5 * 3 * 1  # shard files of level 0
        assert {"0/zarr.json", "1/zarr.json", "2/zarr.json"} <= written.keys()
        _, by_zarr, _ = _levels_by_readers(tmp_path / "out.ome.zarr")
        want = data
        for level in by_zarr:
            np.testing.assert_array_equal(level, want)
            want = _halved_oracle(want, (0, 1, 2), "mean")

    @pytest.mark.parametrize("command, fragments", [
        (["copy", "s.ome.zarr", "--ngff", "0.5", "--shards", "4,16,12", "--chunks", "2,8,8"],
         ["--shards: ", "s.ome.zarr: (4, 16, 12) are not whole chunks of (2, 8, 8): 12 along x is not a multiple "
                        "of 8"]),
        (["copy", "s.ome.zarr", "--shards", "4,16,16"],
         ["--shards: ", "s.ome.zarr: NGFF 0.4 (zarr v2) has no shards; write --ngff 0.5 (zarr v3)"]),
        (["copy", "s.ome.zarr", "--ngff", "0.4", "--shards", "4,16,16", "--chunks", "2,8,8", "--levels", "2"],
         ["--shards: ", "NGFF 0.4 (zarr v2) has no shards"]),
        (["copy", "s.mrc", "--shards", "4,16,16"],
         ["s.mrc: shards: MRC files are not chunked; --shards is for OME-Zarr outputs (.ome.zarr)"]),
        (["resize", "s.ome.zarr", "--shape", "64,1024,1024", "--fill", "zero", "--ngff", "0.5", "--levels", "2",
          "--shards", "64,256,1024"],  # 64 MiB shards of a 256 MiB output
         ["--shards: ", "a tile of whole shards of every level, (64, 256, 1024), would hold 67108864 bytes, "
                        "more than the 16777216"]),
    ])
    def test_bad_shards_are_one_line_and_write_nothing(self, tmp_path, command, fragments):
        write_mrc(tmp_path / "v.mrc", np.zeros((20, 30, 37), np.float32))
        operation, output, *options = command
        assert_user_error(noa(operation, tmp_path / "v.mrc", tmp_path / output, *options), *fragments)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["v.mrc"]

    def test_http_paths_mode_writes_shards_and_refuses_them_for_ngff_0_4(self, tmp_path):
        from fastapi.testclient import TestClient

        from noa_server.app import create_app
        from noa_server.settings import Settings

        root = tmp_path / "root"
        root.mkdir()
        data = write_mrc(root / "in.mrc", np.arange(6 * 9 * 10, dtype=np.float32).reshape(6, 9, 10))
        with TestClient(create_app(Settings(warmup=False, data_root=root))) as client:
            written = client.post("/v1/paths/copy", json={"src": "in.mrc", "dst": "out.ome.zarr", "ngff": "0.5",
                                                          "chunks": [2, 3, 5], "shards": [4, 6, 10]})
            assert written.status_code == 201, written.text
            refused = client.post("/v1/paths/copy", json={"src": "in.mrc", "dst": "no.ome.zarr", "shards": [4, 6, 10]})
            assert assert_problem(refused, 400)["detail"] == ("shards: no.ome.zarr: NGFF 0.4 (zarr v2) has no shards; "
                                                              "write ngff=0.5 (zarr v3) to store chunks in shards")
        array = zarr.open_array(str(root / "out.ome.zarr" / "0"), mode="r")
        assert (array.shards, array.chunks) == ((4, 6, 10), (2, 3, 5))
        np.testing.assert_array_equal(array[...], data)
        assert not (root / "no.ome.zarr").exists()

    def test_the_doors_describe_the_limits_the_store_keeps(self):
        from noa_core.io.protocol import OutputSpec
        from noa_core.operations import spec

        assert f"up to {omezarr.SHARD_CHUNK_BYTES >> 20} MiB" in spec.SHARDS.help
        assert f"at most {omezarr.MAX_SHARD_BYTES >> 20} MiB" in spec.SHARDS.help
        with pytest.raises(ParameterError) as caught:
            omezarr.store_layout(OutputSpec(Path("p.ome.zarr"), (1, 1, 8, 8), np.dtype("uint8"), "C", None, None,
                                            {"ngff": "0.4", "shards": (8, 8)}))
        assert caught.value.param == "shards"
