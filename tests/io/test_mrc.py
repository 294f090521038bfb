"""MRC reading and writing against mrcfile, the real files in shared/data, and hand-made headers."""

from __future__ import annotations

import bz2
import gzip
import shutil
from pathlib import Path

import mrcfile
import numpy as np
import pytest
from conformance import FormatTests
from hypothesis import given, settings
from hypothesis import strategies as st
from mrcfile.dtypes import HEADER_DTYPE

import noa_core
from helpers import SHARED as DATA
from helpers import need_shared, needs_data, random_values, write_mrc
from noa_core import io
from noa_core.errors import OutputExistsError, WriteDTypeError
from noa_core.io import mrc

WRITABLE = ["float32", "int16", "uint16", "float16", "int8", "uint8", "complex64"]
KINDS = {"image": (1, 1, 6, 5), "image stack": (3, 1, 6, 5), "volume": (1, 4, 6, 5), "volume stack": (2, 3, 6, 5)}


def sample(shape, dtype, seed=0):
    return random_values(shape, dtype, seed, span=None)


def raw_mrc(path: Path, data: bytes, nx, ny, nz, mode, order="<", **fields) -> Path:
    """An MRC file made by hand: header fields as given, then ``data``."""
    header = np.zeros((), HEADER_DTYPE.newbyteorder(order))
    header["nx"], header["ny"], header["nz"], header["mode"] = nx, ny, nz, mode
    header["mapc"], header["mapr"], header["maps"] = 1, 2, 3
    header["mx"], header["my"], header["mz"] = nx, ny, nz
    header["map"] = b"MAP "
    header["machst"] = (0x44, 0x44, 0, 0) if order == "<" else (0x11, 0x11, 0, 0)
    header["nversion"] = 20141
    for key, value in fields.items():
        header[key] = value
    path.write_bytes(header.tobytes() + data)
    return path


# ---------------------------------------------------------------------------------------------
# Real files
# ---------------------------------------------------------------------------------------------


@needs_data
@pytest.mark.parametrize("name", ["EMD-3197.map", "emd_3197.map.gz"])
def test_real_maps_match_mrcfile(name):
    array, md = io.read(DATA / name)
    with mrcfile.open(DATA / name, permissive=True) as ref:
        expected = ref.data
        voxel = ref.voxel_size
        assert array.shape == (1,) + expected.shape  # ispg 1: a volume
        np.testing.assert_array_equal(array.numpy()[0], expected)
        assert md.pixel_size == pytest.approx((float(voxel.z), float(voxel.y), float(voxel.x)))
        assert md.mrc.start == (int(ref.header.nzstart), int(ref.header.nystart), int(ref.header.nxstart))
        assert md.statistics.min == pytest.approx(float(ref.header.dmin))
        assert md.statistics.rms == pytest.approx(float(ref.header.rms))
    assert md.kind == "volume" and md.mrc.mode == 2 and md.mrc.space_group == 1
    assert md.labels == ["::::EMDATABANK.org::::EMD-3197::::"]
    assert md.pixel_size == pytest.approx((11.4, 11.4, 11.4))
    assert md.mrc.start == (0, 0, -2)


@needs_data
def test_real_map_is_lazy_and_read_only():
    array, _ = io.read(DATA / "EMD-3197.map")
    assert not array.writable and not array.numpy().flags.writeable
    loaded, _ = io.read(DATA / "EMD-3197.map", mmap=False)
    assert loaded.writable
    np.testing.assert_array_equal(loaded.numpy(), array.numpy())


@needs_data
def test_real_map_round_trip_keeps_header(tmp_path):
    array, md = io.read(DATA / "EMD-3197.map")
    out = tmp_path / "copy.mrc"
    assert io.write(out, array, md) == []
    assert mrcfile.validate(str(out))
    again, md2 = io.read(out)
    np.testing.assert_array_equal(again.numpy(), array.numpy())
    assert md2.pixel_size == pytest.approx(md.pixel_size) and md2.mrc.start == md.mrc.start and md2.origin == md.origin
    assert md2.labels[0] == md.labels[0] and md2.labels[1].startswith("noa ") and len(md2.labels) == 2
    with mrcfile.open(out) as ref:
        assert ref.header.nversion >= 20140
        assert float(ref.header.dmax) == float(array.numpy().max())
        assert float(ref.header.rms) == pytest.approx(float(array.numpy().std()), rel=1e-5)


# ---------------------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", WRITABLE)
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("order", ["C", "F"])
def test_round_trip_every_mode_kind_order(tmp_path, dtype, kind, order):
    shape = KINDS[kind]
    data = sample(shape, dtype)
    src = noa_core.asarray(data).copy(order)
    out = tmp_path / "x.mrc"
    notices = io.write(out, src, order=order)
    assert any("transpose" in n for n in notices) == (order == "F")
    back, md = io.read(out)
    stored = np.dtype("uint16" if dtype == "uint8" else dtype)  # uint8 is widened to mode 6 by default
    assert back.shape == shape and back.dtype == stored and md.kind == kind
    assert back.order == order or min(shape[2:]) == 1
    np.testing.assert_array_equal(back.numpy(), data)
    with mrcfile.open(out, permissive=True) as ref:
        assert int(ref.header.mode) == {"float32": 2, "int16": 1, "uint16": 6, "float16": 12, "int8": 0,
                                        "uint8": 6, "complex64": 4}[dtype]
        axes = (int(ref.header.mapc), int(ref.header.mapr), int(ref.header.maps))
        assert axes == ((2, 1, 3) if order == "F" else (1, 2, 3))
        disk = ref.data.reshape(shape[0], shape[1], *ref.data.shape[-2:])
        expected_disk = data.transpose(0, 1, 3, 2) if order == "F" else data
        np.testing.assert_array_equal(disk, expected_disk)
    assert mrcfile.validate(str(out))


@settings(max_examples=25, deadline=None)
@given(shape=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 5), st.integers(1, 5)),
       dtype=st.sampled_from(WRITABLE), order=st.sampled_from("CF"))
def test_round_trip_property(tmp_path_factory, shape, dtype, order):
    data = sample(shape, dtype, seed=sum(shape))
    out = tmp_path_factory.mktemp("p") / "x.mrcs"
    io.write(out, data, order=order)
    back, md = io.read(out)
    np.testing.assert_array_equal(back.numpy(), data)
    assert md.kind == noa_core.array.layout.kind(shape)


def test_compressed_inputs(tmp_path):
    data = sample((1, 3, 4, 5), "float32")
    plain = tmp_path / "v.mrc"
    io.write(plain, data)
    gz, bz = tmp_path / "v.mrc.gz", tmp_path / "v.mrc.bz2"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    bz.write_bytes(bz2.compress(plain.read_bytes()))
    for path in (gz, bz):
        back, md = io.read(path)
        np.testing.assert_array_equal(back.numpy(), data)
        assert md.kind == "volume"


def test_float64_needs_explicit_dtype(tmp_path):
    data = np.linspace(0, 1, 30).reshape(1, 1, 5, 6)
    with pytest.raises(WriteDTypeError, match=r"float64.*float32"):
        io.write(tmp_path / "x.mrc", data)
    assert list(tmp_path.iterdir()) == []
    io.write(tmp_path / "x.mrc", data, dtype="float32")
    back, _ = io.read(tmp_path / "x.mrc")
    np.testing.assert_array_equal(back.numpy(), data.astype(np.float32))


def test_integer_conversion_refuses_values_that_do_not_fit(tmp_path):
    data = np.array([[0, 40000]], np.int32)
    with pytest.raises(noa_core.DTypeError, match="do not fit int16"):
        io.write(tmp_path / "x.mrc", data, dtype="int16")
    assert list(tmp_path.iterdir()) == []  # no output, no temp file


# ---------------------------------------------------------------------------------------------
# Modes without NumPy types, byte order, axis mapping, ispg
# ---------------------------------------------------------------------------------------------


def test_mode_3_reads_as_complex(tmp_path):
    pairs = np.arange(2 * 3 * 4 * 2, dtype="<i2").reshape(2, 3, 4, 2) - 20
    path = raw_mrc(tmp_path / "c.mrcs", pairs.tobytes(), 4, 3, 2, 3)
    array, md = io.read(path)
    expected = (pairs[..., 0] + 1j * pairs[..., 1]).astype(np.complex64)
    assert array.shape == (2, 1, 3, 4) and md.mrc.mode == 3
    np.testing.assert_array_equal(array.numpy()[:, 0], expected)


@pytest.mark.parametrize("nx", [4, 5])
def test_mode_101_unpacks_low_nibble_first(tmp_path, nx):
    rng = np.random.default_rng(1)
    values = rng.integers(0, 16, size=(2, 3, nx), dtype=np.uint8)
    padded = np.zeros((2, 3, nx + nx % 2), np.uint8)
    padded[..., :nx] = values
    packed = (padded[..., 0::2] | (padded[..., 1::2] << 4)).astype(np.uint8)
    path = raw_mrc(tmp_path / "n.mrc", packed.tobytes(), nx, 3, 2, 101, ispg=1)
    array, md = io.read(path)
    assert array.shape == (1, 2, 3, nx) and md.mrc.mode == 101
    np.testing.assert_array_equal(array.numpy()[0], values)


def test_big_endian_file(tmp_path):
    data = sample((4, 5, 6), ">f4")
    path = tmp_path / "be.mrc"
    with mrcfile.new(path) as m:
        m.set_data(data)
    assert mrcfile.open(path).header.mode.dtype.byteorder == ">"
    array, _md = io.read(path)
    assert array.dtype == np.float32
    assert array.shape == (1, 4, 5, 6)  # mrcfile writes 3-d data as a volume
    np.testing.assert_array_equal(array.numpy()[0], data.astype("<f4"))


def test_unsigned_mode_0_needs_the_imod_stamp_and_flag_clear(tmp_path):
    raw = bytes([0, 1, 200, 255])
    signed, _ = io.read(raw_mrc(tmp_path / "s.mrc", raw, 4, 1, 1, 0))
    assert signed.dtype == np.int8
    np.testing.assert_array_equal(signed.numpy().ravel(), np.frombuffer(raw, np.int8))
    extra = bytearray(84)
    extra[40:48] = np.array([1146047817, 0], "<i4").tobytes()  # IMOD: signed-bytes bit clear
    unsigned, _ = io.read(raw_mrc(tmp_path / "u.mrc", raw, 4, 1, 1, 0, extra2=bytes(extra)))
    assert unsigned.dtype == np.uint8
    np.testing.assert_array_equal(unsigned.numpy().ravel(), np.frombuffer(raw, np.uint8))


@pytest.mark.parametrize("crs", [(1, 2, 3), (2, 1, 3), (3, 1, 2), (2, 3, 1), (3, 2, 1), (1, 3, 2)])
def test_axis_mapping_opens_a_permuted_view(tmp_path, crs):
    disk = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)  # sections, rows, columns
    sizes = {crs[0]: 4, crs[1]: 3, crs[2]: 2}  # X/Y/Z number -> size along that axis
    path = raw_mrc(tmp_path / "m.mrc", disk.tobytes(), 4, 3, 2, 2, ispg=1, mapc=crs[0], mapr=crs[1], maps=crs[2],
                   nxstart=10, nystart=20, nzstart=30)
    array, md = io.read(path)
    expected = np.empty((sizes[3], sizes[2], sizes[1]), np.float32)
    for s, r, c in np.ndindex(disk.shape):  # brute force: element by element, in X, Y, Z terms
        xyz = {crs[0]: c, crs[1]: r, crs[2]: s}
        expected[xyz[3], xyz[2], xyz[1]] = disk[s, r, c]
    assert array.shape == (1,) + expected.shape
    np.testing.assert_array_equal(array.numpy()[0], expected)
    start = {crs[0]: 10, crs[1]: 20, crs[2]: 30}
    assert md.mrc.start == (start[3], start[2], start[1])
    assert min(array.strides) >= 0


def test_ispg_and_overrides(tmp_path):
    data = np.arange(6 * 2 * 3, dtype=np.float32).tobytes()
    stack = raw_mrc(tmp_path / "s.mrcs", data, 3, 2, 6, 2, ispg=0)
    volume = raw_mrc(tmp_path / "v.mrc", data, 3, 2, 6, 2, ispg=1)
    vstack = raw_mrc(tmp_path / "vs.mrc", data, 3, 2, 6, 2, ispg=401, mz=3)
    assert io.read(stack)[0].shape == (6, 1, 2, 3)
    assert io.read(volume)[0].shape == (1, 6, 2, 3)
    assert io.read(vstack)[0].shape == (2, 3, 2, 3)
    assert io.read(stack, as_volume=True)[0].shape == (1, 6, 2, 3)
    assert io.read(volume, as_stack=True)[0].shape == (6, 1, 2, 3)
    np.testing.assert_array_equal(io.read(vstack)[0].numpy().ravel(), np.frombuffer(data, np.float32))


# ---------------------------------------------------------------------------------------------
# Metadata: labels, pixel size through permute, extended header, atomic outputs
# ---------------------------------------------------------------------------------------------


def test_labels_keep_first_and_drop_oldest_after_it(tmp_path):
    md = io.Metadata(format="mrc", shape=(1, 1, 2, 2), dtype="float32", labels=[f"label {i}" for i in range(10)])
    io.write(tmp_path / "x.mrc", np.zeros((2, 2), np.float32), md, label="tested")
    _, back = io.read(tmp_path / "x.mrc")
    assert len(back.labels) == 10
    assert back.labels[0] == "label 0" and back.labels[1] == "label 2" and back.labels[-1].endswith(": tested")


def test_permuted_header_keeps_physical_pixel_size(tmp_path):
    data = sample((1, 4, 5, 6), "float32")
    md = io.Metadata(format="mrc", shape=data.shape, dtype="float32", pixel_size=(3.0, 2.0, 1.5),
                     origin=(30.0, 20.0, 10.0))
    for perm in [(0, 3, 2, 1), (0, 2, 3, 1), (0, 1, 3, 2)]:
        view = noa_core.asarray(data).permute(perm)
        out = tmp_path / f"p{''.join(map(str, perm))}.mrc"
        io.write(out, view, md.permute(perm))
        back, md2 = io.read(out)
        np.testing.assert_array_equal(back.numpy(), data.transpose(perm))
        by_axis = dict(zip((1, 2, 3), md.pixel_size))
        assert md2.pixel_size == pytest.approx(tuple(by_axis[p] for p in perm[1:]))
        origin_by_axis = dict(zip((1, 2, 3), md.origin))
        assert md2.origin == pytest.approx(tuple(origin_by_axis[p] for p in perm[1:]))
        with mrcfile.open(out) as ref:
            voxel = ref.voxel_size
            assert (float(voxel.z), float(voxel.y), float(voxel.x)) == pytest.approx(md2.pixel_size)


def test_extended_header_kept_or_dropped(tmp_path):
    ext = bytes(range(256)) * 4
    data = np.arange(2 * 3 * 4, dtype=np.float32).tobytes()
    path = raw_mrc(tmp_path / "e.mrc", ext + data, 4, 3, 2, 2, nsymbt=len(ext), exttyp=b"FEI1")
    array, md = io.read(path)
    assert md.mrc.extended_header == ext and md.mrc.exttyp == "FEI1"
    np.testing.assert_array_equal(array.numpy().ravel(), np.frombuffer(data, np.float32))
    assert io.write(tmp_path / "same.mrc", array, md) == []
    assert io.read(tmp_path / "same.mrc")[1].mrc.extended_header == ext
    notices = io.write(tmp_path / "perm.mrc", array.permute((0, 1, 3, 2)), md.permute((0, 1, 3, 2)))
    assert io.read(tmp_path / "perm.mrc")[1].mrc.extended_header is None
    assert any("extended header dropped" in n for n in md.permute((0, 1, 3, 2)).notices + notices)
    io.write(tmp_path / "f.mrc", array, md, order="F")  # the sections keep their order: kept
    assert io.read(tmp_path / "f.mrc")[1].mrc.extended_header == ext


def test_existing_output_refused_and_input_untouched(tmp_path):
    path = tmp_path / "in.mrc"
    io.write(path, np.ones((2, 2), np.float32))
    before = path.read_bytes()
    with pytest.raises(OutputExistsError, match="overwrite"):
        io.write(path, np.zeros((2, 2), np.float32))
    assert path.read_bytes() == before
    array, md = io.read(path)
    io.write(path, noa_core.asarray(array.numpy() * 2), md, overwrite=True)  # replaces by rename
    np.testing.assert_array_equal(array.numpy(), np.ones((1, 1, 2, 2)))  # the open input still reads 1s
    np.testing.assert_array_equal(io.read(path)[0].numpy(), 2 * np.ones((1, 1, 2, 2)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mrc"]


def test_io_has_no_open_shadowing_the_builtin():
    """``noa_core.io.read`` is the one name for reading (``io.open`` was an alias that shadowed ``open``)."""
    assert not hasattr(io, "open") and "open" not in io.__all__


def test_copy_of_real_file_with_shutil_still_reads(tmp_path):
    (real,) = need_shared("EMD-3197.map")
    shutil.copy(real, tmp_path / "x.rec")
    assert io.read(tmp_path / "x.rec")[0].shape == (1, 20, 20, 20)


def test_the_header_layout_is_mrcfiles():
    """noa writes the MRC2014 header out itself (importing mrcfile would cost every call 10 ms): the same
    fields, names, types and offsets as mrcfile's, and the FEI records still from mrcfile."""
    from mrcfile.dtypes import get_ext_header_dtype

    from noa_core.io import mrc

    assert mrc.HEADER_DTYPE == HEADER_DTYPE and mrc.HEADER_DTYPE.descr == HEADER_DTYPE.descr
    assert mrc.HEADER_DTYPE.itemsize == mrc.HEADER_BYTES
    for exttyp in ("FEI1", "FEI2"):
        assert mrc._records_dtype(exttyp, ">") == get_ext_header_dtype(exttyp.encode(), ">")
    assert mrc._records_dtype("SERI") is None and mrc._records_dtype(None) is None


# -- the promises every format keeps (tests/io/conformance.py) -----------------------------------


class TestMrcConformance(FormatTests):
    format = mrc.FORMAT

    def sample(self, folder: Path) -> tuple[Path, np.ndarray]:
        path = folder / "sample.mrcs"
        stack = write_mrc(path, random_values((3, 6, 5), "float32", 7), stack=True)
        return path, stack[:, None]  # an image stack: its sections are the batch

    def reference(self, path: Path) -> np.ndarray:
        with mrcfile.open(path) as m:
            return np.array(m.data)
