"""MRC files the way IMOD, RELION and FEI software write them (issue 16 items 1, 2, 4, 5): headers are
written by mrcfile, then edited by hand as each tool writes them; values are checked against NumPy,
headers and extended headers against mrcfile, and every MRC noa writes passes ``mrcfile.validate``."""

from __future__ import annotations

import io as text_io
import json
from pathlib import Path

import mrcfile
import numpy as np
import pytest
from mrcfile.dtypes import HEADER_DTYPE, get_ext_header_dtype

from helpers import assert_user_error, fei1_stack, mrc_data, noa, write_mrc
from noa_core import io
from noa_core.errors import DTypeError, spelt

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
