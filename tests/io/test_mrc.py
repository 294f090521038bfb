"""MRC reading and writing against mrcfile, the real files in shared/data, and hand-made headers.

MRC files the way IMOD, RELION and FEI software write them (issue 16 items 1, 2, 4, 5): headers are
written by mrcfile, then edited by hand as each tool writes them; values are checked against NumPy,
headers and extended headers against mrcfile, and every MRC noa writes passes ``mrcfile.validate``."""

from __future__ import annotations

import bz2
import datetime
import gzip
import io as text_io
import json
import shutil
from pathlib import Path

import mrcfile
import numpy as np
import pytest
from conformance import FormatTests
from hypothesis import given, settings
from hypothesis import strategies as st
from mrcfile.dtypes import HEADER_DTYPE, get_ext_header_dtype

import noa_core
from helpers import SHARED as DATA
from helpers import assert_user_error, fei1_stack, mrc_data, need_shared, needs_data, noa, random_values, write_mrc
from noa_core import io
from noa_core.errors import DTypeError, OutputExistsError, WriteDTypeError, spelt
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


def test_source_date_epoch_fixes_the_labels_date_so_two_runs_write_the_same_bytes(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # 2023-11-14 22:13:20 UTC
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    io.write(tmp_path / "a.mrc", data, label="tested")
    io.write(tmp_path / "b.mrc", data, label="tested")
    assert (tmp_path / "a.mrc").read_bytes() == (tmp_path / "b.mrc").read_bytes()
    with mrcfile.open(tmp_path / "a.mrc") as ref:
        assert ref.header.label[0].decode().startswith(f"noa {noa_core.__version__} 2023-11-14 22:13: tested")


def test_without_source_date_epoch_the_label_carries_the_minute_it_was_written(tmp_path, monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH")  # tests/conftest.py sets it for every other test
    before = datetime.datetime.now(datetime.UTC).replace(second=0, microsecond=0)
    io.write(tmp_path / "a.mrc", np.zeros((2, 3), np.float32), label="tested")
    after = datetime.datetime.now(datetime.UTC)
    with mrcfile.open(tmp_path / "a.mrc") as ref:
        label = ref.header.label[0].decode()
    stamp = datetime.datetime.strptime(label.split(" ", 2)[2][:16], "%Y-%m-%d %H:%M").replace(tzinfo=datetime.UTC)
    assert label.startswith(f"noa {noa_core.__version__} ") and label.endswith(": tested")
    assert before <= stamp <= after


@pytest.mark.parametrize("given", ["soon", "-1", "1.5", "", "99999999999999"])
def test_a_source_date_epoch_that_is_no_count_of_seconds_is_one_line_and_no_output(tmp_path, given):
    src = tmp_path / "in.mrc"
    write_mrc(src, np.zeros((2, 3), np.float32))
    result = noa("copy", src, tmp_path / "out.mrc", env={"SOURCE_DATE_EPOCH": given})
    assert_user_error(result, f"SOURCE_DATE_EPOCH: {given!r} is not a count of seconds since 1970-01-01 UTC")
    assert not (tmp_path / "out.mrc").exists()


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


# -- other software's MRC conventions ------------------------------------------------------------------------------


IMOD_STAMP = 1146047817
BYTES = np.array([0, 1, 127, 128, 200, 255], np.uint8)  # both halves of the byte range


def valid(path: Path) -> bool:
    """mrcfile's strict MRC2014 check, its report kept for the assertion message."""
    report = text_io.StringIO()
    assert mrcfile.validate(str(path), print_file=report), report.getvalue()
    return True


def edit_header(path: Path, **fields) -> Path:
    """Header fields set by hand in a file mrcfile wrote (little-endian), as another tool would write them."""
    header = np.memmap(path, HEADER_DTYPE, "r+", shape=())
    for name, value in fields.items():
        header[name] = value
    header.flush()
    del header
    return path


def imod_extra(stamp: int, flags: int) -> bytes:
    """The 'extra2' field with IMOD's stamp and flags at header bytes 152 and 156."""
    extra = bytearray(84)
    extra[40:48] = np.array([stamp, flags], "<i4").tobytes()
    return bytes(extra)


def imod_fields(path: Path) -> tuple[int, int]:
    """(stamp, flags) as IMOD reads them from header bytes 152 and 156."""
    stamp, flags = np.frombuffer(path.read_bytes(), "<i4", count=2, offset=152)
    return int(stamp), int(flags)


def mrc_file(path: Path, data: np.ndarray) -> Path:
    """``path`` written by mrcfile with ``data``."""
    write_mrc(path, data)
    return path


def info(path: Path, *args) -> dict:
    result = noa("info", path, "--json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# ---------------------------------------------------------------------------------------------
# Item 1: mode 0 by IMOD's rule
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stamp, flags, expected", [
    (IMOD_STAMP, 1, np.int8),    # MRC_FLAGS_SBYTES set: signed
    (IMOD_STAMP, 3, np.int8),    # other bits do not matter
    (IMOD_STAMP, 0, np.uint8),   # bit clear: unsigned
    (IMOD_STAMP, 2, np.uint8),
    (0, 1, np.int8),             # flags without the stamp mean nothing: MRC2014, signed
])
def test_mode_0_is_read_by_imods_rule(tmp_path, stamp, flags, expected):
    path = tmp_path / "bytes.mrc"
    write_mrc(path, BYTES.view(np.int8).reshape(1, 2, 3))
    edit_header(path, extra2=imod_extra(stamp, flags))
    array, md = io.read(path)
    assert array.dtype == expected and io.probe(path).dtype == expected
    np.testing.assert_array_equal(array.numpy().ravel(), BYTES.view(expected))
    unstamped = [n for n in md.notices if "IMOD's stamp" in n]
    assert bool(unstamped) == (stamp != IMOD_STAMP)


def test_unstamped_mode_0_says_it_reads_signed_bytes(tmp_path):
    described = info(mrc_file(tmp_path / "plain.mrc", BYTES.view(np.int8).reshape(1, 1, 6)))
    assert described["dtype"] == "int8"
    assert any("signed" in n and "MRC2014" in n for n in described["notices"])


def test_uint8_is_widened_to_mode_6_by_default(tmp_path):
    data = BYTES.reshape(1, 1, 2, 3)
    out = tmp_path / "u.mrc"
    notices = io.write(out, data)
    assert any("uint16 (mode 6)" in n for n in notices)
    values, header, _ = mrc_data(out)
    assert int(header.mode) == 6
    np.testing.assert_array_equal(values, data.reshape(2, 3))  # mrcfile reads the same values
    assert valid(out)


def test_int8_is_mode_0_with_imods_signed_flag(tmp_path):
    data = BYTES.view(np.int8).reshape(1, 1, 2, 3)
    out = tmp_path / "s.mrc"
    io.write(out, data)
    stamp, flags = imod_fields(out)
    assert stamp == IMOD_STAMP and flags & 1  # IMOD reads signed
    values, header, _ = mrc_data(out)
    assert int(header.mode) == 0
    np.testing.assert_array_equal(values, data.reshape(2, 3))
    assert valid(out)


def test_copy_to_uint8_round_trips_through_mrcfile(tmp_path):
    src = mrc_file(tmp_path / "src.mrc", BYTES.astype(np.uint16).reshape(1, 2, 3))
    out = tmp_path / "u8.mrc"
    result = noa("copy", src, out, "--dtype", "uint8")
    assert result.returncode == 0, result.stderr
    assert "uint16 (mode 6)" in result.stderr
    values, header, _ = mrc_data(out)
    assert int(header.mode) == 6
    np.testing.assert_array_equal(values, BYTES.reshape(2, 3))
    assert valid(out)


def test_widened_uint8_is_still_checked_and_clamped_as_uint8(tmp_path):
    src = mrc_file(tmp_path / "f.mrc", np.array([[[-5, 100, 300]]], np.float32))
    out = tmp_path / "u8.mrc"
    assert_user_error(noa("copy", src, out, "--dtype", "uint8"), "do not fit uint8")
    assert not out.exists()
    assert noa("copy", src, out, "--dtype", "uint8", "--clamp").returncode == 0
    np.testing.assert_array_equal(mrc_data(out)[0].ravel(), [0, 100, 255])
    with pytest.raises(DTypeError, match="uint8"), io.create(tmp_path / "blocks.mrc", (1, 1, 1, 3), np.uint8) as writer:
        writer.write_block(0, np.array([[1.0, 2.0, 300.0]]))
    assert not (tmp_path / "blocks.mrc").exists()


@pytest.mark.parametrize("order", ["C", "F"])
def test_imod_opt_in_writes_unsigned_mode_0(tmp_path, order):
    src = mrc_file(tmp_path / "src.mrc", BYTES.astype(np.uint16).reshape(1, 2, 3))
    out = tmp_path / "imod.mrc"
    result = noa("copy", src, out, "--dtype", "uint8", "--uint8-mode", "imod", "--order", order)
    assert result.returncode == 0, result.stderr
    assert "strict MRC2014 readers" in result.stderr
    stamp, flags = imod_fields(out)
    assert stamp == IMOD_STAMP and not flags & 1  # IMOD reads unsigned
    values, header, _ = mrc_data(out)
    assert int(header.mode) == 0
    disk = BYTES.reshape(2, 3).T if order == "F" else BYTES.reshape(2, 3)
    np.testing.assert_array_equal(values.view(np.uint8).reshape(disk.shape), disk)  # mrcfile sees int8
    back, _ = io.read(out)
    assert back.dtype == np.uint8
    np.testing.assert_array_equal(back.numpy().reshape(2, 3), BYTES.reshape(2, 3))


def test_imod_output_of_small_values_passes_validate(tmp_path):
    """Values 0..127 read the same signed or not, so even strict readers agree on them."""
    src = mrc_file(tmp_path / "s.mrc", np.arange(6, dtype=np.int16).reshape(1, 2, 3))
    out = tmp_path / "imod.mrc"
    assert noa("copy", src, out, "--dtype", "uint8", "--uint8-mode", "imod").returncode == 0
    assert valid(out)


def test_ewise_booleans_follow_the_uint8_mode(tmp_path):
    src = mrc_file(tmp_path / "a.mrc", np.arange(6, dtype=np.float32).reshape(1, 2, 3))
    widened, imod = tmp_path / "w.mrc", tmp_path / "i.mrc"
    assert noa("ewise", "a > 2", src, "-o", widened).returncode == 0
    assert noa("ewise", "a > 2", src, "-o", imod, "--uint8-mode", "imod").returncode == 0
    expected = (np.arange(6) > 2).reshape(2, 3)
    for out, mode in ((widened, 6), (imod, 0)):
        values, header, _ = mrc_data(out)
        assert int(header.mode) == mode
        np.testing.assert_array_equal(values, expected)
        assert valid(out)


def test_a_bad_uint8_mode_is_one_line(tmp_path):
    src = mrc_file(tmp_path / "a.mrc", np.zeros((1, 2, 3), np.float32))
    result = noa("copy", src, tmp_path / "o.mrc", "--uint8-mode", "unsigned")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert not (tmp_path / "o.mrc").exists()


def test_the_declared_uint8_modes_are_the_formats():
    from noa_core.io import mrc
    from noa_core.operations import spec

    assert spec.UINT8_MODE.type.values == mrc.UINT8_MODES


# ---------------------------------------------------------------------------------------------
# Item 4: ispg 0 maps
# ---------------------------------------------------------------------------------------------


def relion_map(path: Path, nz: int = 4) -> np.ndarray:
    """A 3-d map the way RELION and cryoDRGN write it: ispg 0, mz = nz."""
    data = np.arange(nz * 3 * 5, dtype=np.float32).reshape(nz, 3, 5)
    write_mrc(path, data, voxel_size=1.5)
    edit_header(path, ispg=0, mz=nz, cella=(5 * 1.5, 3 * 1.5, nz * 1.5))
    return data


@pytest.mark.parametrize("name", ["map.mrc", "map.map", "MAP.MRC"])
def test_ispg_0_with_mz_equal_nz_is_a_volume(tmp_path, name):
    data = relion_map(tmp_path / name)
    array, md = io.read(tmp_path / name)
    assert array.shape == (1, 4, 3, 5) and md.kind == "volume"
    np.testing.assert_array_equal(array.numpy()[0], data)
    assert md.pixel_size == (1.5, 1.5, 1.5)
    assert any("read as a volume" in n and "as_stack=true" in spelt(n) for n in md.notices)


@pytest.mark.parametrize("name", ["particles.mrcs", "tilts.st", "aligned.ali"])
def test_a_stack_name_keeps_ispg_0_a_stack(tmp_path, name):
    relion_map(tmp_path / name)
    array, md = io.read(tmp_path / name)
    assert array.shape == (4, 1, 3, 5) and not any("read as a volume" in n for n in md.notices)


def test_the_overrides_still_win(tmp_path):
    relion_map(tmp_path / "map.mrc")
    relion_map(tmp_path / "particles.mrcs")
    assert info(tmp_path / "map.mrc", "--as-stack")["shape"] == [4, 1, 3, 5]
    assert info(tmp_path / "particles.mrcs", "--as-volume")["shape"] == [1, 4, 3, 5]
    described = info(tmp_path / "map.mrc")
    assert described["kind"] == "volume" and any("read as a volume" in n for n in described["notices"])


def test_ispg_0_with_mz_1_stays_a_stack(tmp_path):
    path = tmp_path / "stack.mrc"
    write_mrc(path, np.zeros((4, 3, 5), np.float32), stack=True)
    assert io.read(path)[0].shape == (4, 1, 3, 5)


def test_a_compressed_map_keeps_its_name(tmp_path):
    import gzip

    relion_map(tmp_path / "map.mrc")
    (tmp_path / "map.mrc.gz").write_bytes(gzip.compress((tmp_path / "map.mrc").read_bytes()))
    (tmp_path / "p.mrcs.gz").write_bytes(gzip.compress((tmp_path / "map.mrc").read_bytes()))
    assert io.probe(tmp_path / "map.mrc.gz").shape == (1, 4, 3, 5)
    assert io.probe(tmp_path / "p.mrcs.gz").shape == (4, 1, 3, 5)


def test_a_relion_map_copies_as_a_valid_volume(tmp_path):
    data = relion_map(tmp_path / "map.mrc")
    out = tmp_path / "out.mrc"
    assert noa("copy", tmp_path / "map.mrc", out).returncode == 0
    values, header, voxel = mrc_data(out)
    assert int(header.ispg) == 1 and int(header.mz) == 4
    np.testing.assert_array_equal(values, data)
    assert voxel.x == voxel.y == voxel.z == pytest.approx(1.5)
    assert valid(out)


# ---------------------------------------------------------------------------------------------
# Item 5: extended headers
# ---------------------------------------------------------------------------------------------


def test_info_reports_fei1_sections_as_mrcfile_indexes_them(tmp_path):
    path = tmp_path / "tilts.mrcs"
    fei1_stack(path)
    described = info(path)
    with mrcfile.open(path) as ref:
        indexed = ref.indexed_extended_header
        nbytes = ref.extended_header.nbytes
    assert described["exttyp"] == "FEI1" and described["extended_header_bytes"] == nbytes
    assert [s["tilt_angle"] for s in described["sections"]] == pytest.approx(list(indexed["Alpha tilt"]))
    np.testing.assert_allclose([s["pixel_size"] for s in described["sections"]],
                               np.stack([indexed["Pixel size Y"], indexed["Pixel size X"]], axis=1) * 1e10)
    assert "FEI1" in noa("info", path).stdout


@pytest.mark.parametrize("order", ["C", "F"])
def test_fei1_is_kept_when_sections_keep_their_order(tmp_path, order):
    src, out = tmp_path / "tilts.mrcs", tmp_path / "out.mrcs"
    data, _ = fei1_stack(src)
    assert noa("copy", src, out, "--order", order, "--dtype", "float16").returncode == 0
    with mrcfile.open(src) as a, mrcfile.open(out) as b:
        assert bytes(b.header.exttyp) == b"FEI1"
        assert a.extended_header.tobytes() == b.extended_header.tobytes()
        np.testing.assert_array_equal(b.indexed_extended_header, a.indexed_extended_header)
    np.testing.assert_array_equal(io.read(out)[0].numpy()[:, 0], data.astype(np.float16))
    assert valid(out)


def test_fei1_is_dropped_with_a_notice_when_sections_move(tmp_path):
    src, out = tmp_path / "tilts.mrcs", tmp_path / "out.mrc"
    fei1_stack(src)
    result = noa("permute", src, out, "--axes", "2,1,0,3")
    assert result.returncode == 0, result.stderr
    assert "extended header dropped" in result.stderr
    _, header, _ = mrc_data(out)
    assert int(header.nsymbt) == 0 and bytes(header.exttyp).strip(b"\0 ") == b""
    assert valid(out)


def test_fei1_records_of_a_big_endian_file_are_written_little_endian(tmp_path):
    little, big, out = tmp_path / "le.mrcs", tmp_path / "be.mrcs", tmp_path / "out.mrcs"
    data, _ = fei1_stack(little)
    with mrcfile.open(little) as f:
        header = np.array(f.header).astype(HEADER_DTYPE.newbyteorder(">"))
        records = np.array(f.indexed_extended_header).astype(get_ext_header_dtype(b"FEI1", ">"))
        expected = f.extended_header.tobytes()
    header["machst"] = (0x11, 0x11, 0, 0)
    big.write_bytes(header.tobytes() + records.tobytes() + data.astype(">f4").tobytes())
    assert info(big)["sections"] == info(little)["sections"]
    assert noa("copy", big, out).returncode == 0
    with mrcfile.open(out) as f:
        assert f.extended_header.tobytes() == expected
    assert valid(out)


def ccp4_map(path: Path) -> np.ndarray:
    """A map the way CCP4 wrote them before MRC2014: nversion 0, no exttyp, symmetry operators as two
    80-character records in the extended header."""
    data = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    symmetry = b"".join(op.ljust(80).encode() for op in ("X,Y,Z", "-X,Y+1/2,-Z"))
    with mrcfile.new(path, data, overwrite=True) as f:
        f.set_extended_header(np.frombuffer(symmetry, "V1"))
        f.voxel_size = 2.0
    edit_header(path, nversion=0, exttyp=b"", ispg=4)
    return data


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_ccp4_symmetry_block_is_written_with_its_type(tmp_path, order):
    src, out = tmp_path / "old.map", tmp_path / "out.mrc"
    data = ccp4_map(src)
    described = info(src)
    assert described["exttyp"] is None and described["extended_header_bytes"] == 160
    assert noa("copy", src, out, "--order", order).returncode == 0
    values, header, voxel = mrc_data(out)
    assert int(header.nsymbt) == 160 and bytes(header.exttyp) == b"CCP4" and int(header.nversion) == 20141
    np.testing.assert_array_equal(values.transpose(0, 2, 1) if order == "F" else values, data)
    assert voxel.x == pytest.approx(2.0)
    assert valid(out)


def test_an_extended_header_of_unknown_type_is_dropped_with_a_notice(tmp_path):
    src, out = tmp_path / "odd.mrc", tmp_path / "out.mrc"
    data = np.ones((2, 3, 4), np.float32)
    with mrcfile.new(src, data) as f:
        f.set_extended_header(np.arange(16, dtype=np.uint8))
    edit_header(src, exttyp=b"ABCD")
    result = noa("copy", src, out)
    assert result.returncode == 0 and "extended header dropped" in result.stderr and "ABCD" in result.stderr
    assert int(mrc_data(out)[1].nsymbt) == 0
    assert valid(out)


# ---------------------------------------------------------------------------------------------
# Item 2, MRC side: an unknown voxel size stays unknown
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cell", [0.0, -12.0, float("nan")])
def test_a_voxel_size_of_zero_or_less_is_unknown(tmp_path, cell):
    src = edit_header(mrc_file(tmp_path / "src.mrc", np.ones((2, 3, 4), np.float32)), cella=(cell, cell, cell))
    out = tmp_path / "out.mrc"
    described = info(src)
    assert described["pixel_size"] == [0.0, 0.0, 0.0]
    assert "pixel size (DHW)  unknown" in noa("info", src).stdout
    for order in ("C", "F"):
        assert noa("copy", src, out, "--order", order, "--force").returncode == 0
        assert tuple(mrc_data(out)[2].tolist()) == (0.0, 0.0, 0.0)
        assert info(out)["pixel_size"] == [0.0, 0.0, 0.0]
        assert valid(out)


def test_a_partly_known_voxel_size_says_which_axis_is_unknown(tmp_path):
    src = tmp_path / "src.mrc"
    write_mrc(src, np.ones((2, 3, 4), np.float32), voxel_size=(1.5, 1.5, 0.0))
    assert "pixel size (DHW)  unknown, 1.5, 1.5 Å" in noa("info", src).stdout


# -- an image stack's Z cell (issue 25 item 8) ----------------------------------------------------------


@pytest.mark.parametrize("source", ["stack.mrcs", "stack.tif"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_an_image_stack_gets_imods_z_cell(tmp_path, source, order):
    import tifffile

    data = np.random.default_rng(0).normal(size=(3, 8, 10)).astype(np.float32)
    if source.endswith(".mrcs"):
        write_mrc(tmp_path / source, data, stack=True, voxel_size=(1.5, 1.5, 0.0))
    else:  # an ImageJ stack whose sections have no Z spacing, X/Y at 1.5 Å
        tifffile.imwrite(tmp_path / source, data, imagej=True, resolution=(1 / 1.5, 1 / 1.5),
                         metadata={"axes": "TYX", "unit": "Angstrom"})
    assert noa("copy", tmp_path / source, tmp_path / "out.mrcs", "--order", order).returncode == 0
    _got, header, voxel = mrc_data(tmp_path / "out.mrcs")
    assert header.ispg == 0 and header.mz == 1
    # IMOD's newstack: cella z = mz x the pixel size, never 0, so the Z spacing readers take is the pixel size
    assert float(header.cella.z) == pytest.approx(1.5 * int(header.mz))
    assert (float(voxel.x), float(voxel.y), float(voxel.z)) == pytest.approx((1.5, 1.5, 1.5))
    assert mrcfile.validate(str(tmp_path / "out.mrcs"), print_file=text_io.StringIO())


def test_an_image_stack_of_unknown_pixel_size_keeps_it_unknown(tmp_path):
    write_mrc(tmp_path / "s.mrcs", np.zeros((3, 8, 10), np.float32), stack=True)
    assert noa("copy", tmp_path / "s.mrcs", tmp_path / "out.mrcs").returncode == 0
    _, header, _ = mrc_data(tmp_path / "out.mrcs")
    assert (float(header.cella.x), float(header.cella.y), float(header.cella.z)) == (0.0, 0.0, 0.0)
