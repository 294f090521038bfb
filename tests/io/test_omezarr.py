"""OME-Zarr stores as a format of noa's io protocol: noa reads what zarr and ome-zarr-py write, and they
read what noa writes (values, axes, scale and units); outputs are atomic directories."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import zarr
from conformance import FormatTests
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import assert_problem, assert_user_error, noa, write_mrc
from noa_core import io
from noa_core.errors import (
    AxisMappingError,
    FileFormatError,
    HeaderError,
    LayoutError,
    NotAFileError,
    OutputExistsError,
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
