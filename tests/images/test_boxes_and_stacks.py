"""The in-memory stack functions (noa.resize, bin, flip, rotx, sections, average) and the index arithmetic
they share with the file operations, against NumPy: slicing and np.pad, a reshape-mean, np.flip, np.rot90; and
the headers they return for (array, metadata) pairs, against what the commands write (read by mrcfile)."""

from __future__ import annotations

import re

import mrcfile
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import noa_core as noa
from helpers import fei1_stack, load, random_values
from helpers import noa as noa_command
from noa_core import io
from noa_core.compute import compute_path
from noa_core.errors import ParameterError, ShapeError, StrideError
from noa_core.images import boxes, stacks

SETTINGS = settings(max_examples=25, deadline=None)
shapes = st.tuples(*(st.integers(1, 5) for _ in range(4)))
volume_shapes = st.tuples(st.integers(1, 3), st.integers(2, 5), st.integers(1, 5), st.integers(1, 5))
DTYPES = ("int8", "uint8", "int16", "uint16", "float16", "float32", "float64", "complex64")


def values(shape, dtype="float32", seed=0) -> np.ndarray:
    return random_values(shape, dtype, seed, mean=3, sd=10)


def as_array(data: np.ndarray, order: str = "C") -> noa.Array:
    """The data as an Array laid out in ``order`` (noa's F: each section column-major)."""
    if order == "F":
        return noa.asarray(np.ascontiguousarray(data.transpose(0, 1, 3, 2))).permute((0, 1, 3, 2))
    return noa.asarray(data)


# -- the oracles --------------------------------------------------------------------------------------------


def resized(data: np.ndarray, target, value) -> np.ndarray:
    """Crop or pad about N//2 with NumPy slicing and np.pad."""
    pads, crops = [], []
    for n, m in zip(data.shape, target):
        off = n // 2 - m // 2  # input index of output index 0
        start, stop = max(off, 0), min(off + m, n)
        crops.append(slice(start, stop))
        pads.append((max(-off, 0), m - (stop - start) - max(-off, 0)))
    return np.pad(data[tuple(crops)], pads, constant_values=value)


def binned(data: np.ndarray, k: int, depth: bool) -> np.ndarray:
    b, d, h, w = data.shape
    kd = k if depth else 1
    start = [(n % f) // 2 for n, f in zip((d, h, w), (kd, k, k))]
    n = [d // kd, h // k, w // k]
    box = data[:, start[0]:start[0] + n[0] * kd, start[1]:start[1] + n[1] * k, start[2]:start[2] + n[2] * k]
    wide = np.complex128 if data.dtype.kind == "c" else np.float64
    means = box.astype(wide).reshape(b, n[0], kd, n[1], k, n[2], k).mean(axis=(2, 4, 6))
    return (np.rint(means) if data.dtype.kind in "iu" else means).astype(data.dtype)


# -- resize --------------------------------------------------------------------------------------------------


@SETTINGS
@given(shape=shapes, target=shapes, order=st.sampled_from("CF"), fill=st.sampled_from(["zero", "mean", "-2.5"]))
def test_resize_matches_numpy_crop_and_pad(shape, target, order, fill):
    data = values(shape)
    got = noa.resize(as_array(data, order), target, fill=fill).numpy()
    value = {"zero": 0.0, "mean": np.float32(data.astype(np.float64).mean()), "-2.5": -2.5}[fill]
    expected = resized(data, target, value)
    assert got.shape == tuple(target) and got.dtype == data.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_resize_keeps_every_type_and_rounds_an_integer_mean(dtype):
    data = values((1, 3, 5, 4), dtype)
    got = noa.resize(data, (7, 2), fill="mean").numpy()
    assert got.dtype == np.dtype(dtype)
    mean = data.astype(np.complex128 if data.dtype.kind == "c" else np.float64).mean()
    value = np.rint(mean) if data.dtype.kind in "iu" else mean
    np.testing.assert_allclose(got, resized(data, (1, 3, 7, 2), np.asarray(value).astype(dtype)), rtol=1e-3)


def test_resize_shapes_and_fill_values_are_checked():
    assert boxes.resize_shape((2, 3, 4, 5), (7, 8)) == (2, 3, 7, 8)
    assert boxes.resize_shape((2, 3, 4, 5), (6, 7, 8)) == (2, 6, 7, 8)
    assert boxes.resize_offsets((1, 1, 5, 4), (1, 1, 2, 7)) == (0, 0, 1, -1)
    with pytest.raises(ParameterError, match="shape: 1 sizes given"):
        noa.resize(np.zeros((4, 4), np.float32), (3,))
    with pytest.raises(ParameterError, match="fill: 'blue' is not mean, zero or a number"):
        noa.resize(np.zeros((4, 4), np.float32), (3, 3), fill="blue")
    with pytest.raises(ParameterError, match=r"fill: '300' does not fit the input's type int8 \(-128..127\)"):
        noa.resize(np.zeros((4, 4), np.int8), (6, 6), fill="300")
    with pytest.raises(ParameterError, match=r"fill: '1.5' is not an integer"):
        noa.resize(np.zeros((4, 4), np.int16), (6, 6), fill="1.5")
    with pytest.raises(ParameterError, match="not a finite number"):
        noa.resize(np.zeros((4, 4), np.float32), (6, 6), fill="nan")


# -- bin -----------------------------------------------------------------------------------------------------


@SETTINGS
@given(shape=volume_shapes, k=st.integers(1, 3), depth=st.booleans(), order=st.sampled_from("CF"),
       dtype=st.sampled_from(DTYPES))
def test_bin_is_a_reshape_mean_of_the_evenly_cropped_region(shape, k, depth, order, dtype):
    shape = tuple(max(n, k) if i else n for i, n in enumerate(shape))  # at least one bin per binned axis
    data = values(shape, dtype)
    got = noa.bin_voxels(as_array(data, order), k, depth=depth).numpy()
    expected = binned(data, k, depth)
    assert got.dtype == data.dtype and got.shape == expected.shape
    if data.dtype.kind in "iu":  # float64 sums on both sides: the same rounding
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-3 if dtype == "float16" else 1e-6, atol=1e-6)


def test_bin_refuses_what_it_cannot_bin():
    with pytest.raises(ShapeError, match=r"bin depth bins volumes.*\(4, 1, 8, 8\) is a stack of images"):
        noa.bin_voxels(np.zeros((4, 1, 8, 8), np.float32), 2, depth=True)
    with pytest.raises(ShapeError, match=r"width axis of shape \(1, 1, 8, 3\) has 3 pixels, fewer than one bin"):
        noa.bin_voxels(np.zeros((8, 3), np.float32), 4)
    with pytest.raises(ParameterError, match="factor: 0 is below 1"):
        noa.bin_voxels(np.zeros((8, 8), np.float32), 0)


# -- flip and rotx -------------------------------------------------------------------------------------------


@SETTINGS
@given(shape=volume_shapes, axis=st.sampled_from("xyz"), order=st.sampled_from("CF"))
def test_flip_is_numpy_flip(shape, axis, order):
    data = values(shape)
    got = noa.flip(as_array(data, order), axis)
    np.testing.assert_array_equal(got.numpy(), np.flip(data, {"x": 3, "y": 2, "z": 1}[axis]))
    assert all(s >= 0 for s in got.strides) and got.are_contiguous("C")


def test_flip_z_needs_volumes_and_negative_strides_stay_refused():
    with pytest.raises(ShapeError, match=r"flip axis=z.*\(3, 1, 4, 4\) is a stack of images"):
        noa.flip(np.zeros((3, 1, 4, 4), np.float32), "z")
    with pytest.raises(StrideError):
        noa.asarray(np.zeros((4, 4), np.float32))[:, :, ::-1]


@SETTINGS
@given(shape=volume_shapes, order=st.sampled_from("CF"))
def test_rotx_is_imods_rotation_by_minus_90_about_x(shape, order):
    data = values(shape)
    got = noa.rotx(as_array(data, order)).numpy()
    # IMOD's clip rotx: out[z'][y'][x] = in[y'][ny-1-z'][x], which is np.rot90 over (Z, Y) of each volume
    expected = np.stack([np.rot90(volume, 1, axes=(0, 1)) for volume in data])
    np.testing.assert_array_equal(got, expected)
    _b, _d, h, _w = shape
    for k in range(h):  # the definition itself, element by element on one column
        np.testing.assert_array_equal(got[:, k, :, 0], data[:, :, h - 1 - k, 0])


def test_rotx_refuses_images_naming_the_shape():
    with pytest.raises(ShapeError, match=r"rotx needs volumes.*\(5, 1, 6, 6\) is a stack of images"):
        noa.rotx(np.zeros((5, 1, 6, 6), np.float32))
    with pytest.raises(ShapeError, match=r"\(1, 1, 6, 6\) is one image"):
        noa.rotx(np.zeros((6, 6), np.float32))


# -- sections and average ------------------------------------------------------------------------------------


@given(ranges=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 9)), min_size=1, max_size=12),
       start=st.integers(-60, 60), stop=st.integers(-60, 60))
@settings(max_examples=60, deadline=None)
def test_a_selection_indexes_as_the_list_it_stands_for(ranges, start, stop):
    """Issue 32 item 12: a range list is kept as ranges (10 KB of text named 125 million sections, listed one
    by one past 6.5 GB); indexing and slicing it must give what the listed sections would."""
    pairs = [(first, first + length) for first, length in ranges]
    listed = [i for first, last in pairs for i in range(first, last + 1)]
    selection = stacks.Selection(pairs)
    assert len(selection) == len(listed) and list(selection) == listed
    assert selection[start:stop] == listed[start:stop]
    for i in (0, -1, len(listed) // 2):
        assert selection[i] == listed[i]
    with pytest.raises(IndexError):
        selection[len(listed)]


def test_a_huge_range_list_is_checked_against_the_output_limit_before_anything_is_listed():
    from noa_core.errors import LimitError
    from noa_core.limits import output_voxel_limit

    text = ",".join(["0-99999"] * 1250)  # 125 million sections, 10 KB of text
    assert len(stacks.parse_ranges(text, 100_000, "keep", (100_000, 1, 2, 2))) == 125_000_000
    with output_voxel_limit(1_000_000), pytest.raises(LimitError, match="500000000 voxels; the limit is 1000000"):
        stacks.parse_ranges(text, 100_000, "keep", (100_000, 1, 2, 2))


def test_range_lists_parse_and_name_the_bad_part():
    assert list(stacks.parse_ranges("0-3,7, 5", 10, "keep")) == [0, 1, 2, 3, 7, 5]
    assert stacks.runs([0, 1, 2, 7, 5, 6]) == [(0, 0, 3), (3, 7, 1), (4, 5, 2)]
    for text, words in (("0-3,x", "'x' in '0-3,x' is not a section number"),
                        ("5-2", "range '5-2' runs backwards"),
                        ("0-10", "section 10 (in '0-10') is outside 0..9: the input has 10 sections"),
                        ("1,,2", "'' in '1,,2'"), ("-1", "'-1'")):
        with pytest.raises(ParameterError, match=re.escape(words)):
            stacks.parse_ranges(text, 10, "keep")
    with pytest.raises(ParameterError, match="drop: '0-2' drops every one of the 3 sections"):
        stacks.selected_sections((3, 1, 2, 2), None, "0-2")
    with pytest.raises(ParameterError, match="give either keep or drop"):
        stacks.selected_sections((3, 1, 2, 2), "1", "2")


@SETTINGS
@given(shape=shapes, order=st.sampled_from("CF"), data=st.data())
def test_sections_keep_and_drop_match_fancy_indexing(shape, order, data):
    array = values(shape)
    axis = 0 if shape[0] > 1 else 1
    count = shape[axis]
    keep = data.draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=6))
    got = noa.sections(as_array(array, order), keep=",".join(map(str, keep))).numpy()
    np.testing.assert_array_equal(got, np.take(array, keep, axis=axis))
    drop = sorted(set(data.draw(st.lists(st.integers(0, count - 1), max_size=count - 1))))
    if len(drop) < count:
        left = [i for i in range(count) if i not in drop]
        got = noa.sections(as_array(array, order), drop=",".join(map(str, drop)) or None,
                           keep=None if drop else ",".join(map(str, left))).numpy()
        np.testing.assert_array_equal(got, np.take(array, left, axis=axis))


@SETTINGS
@given(shape=shapes, group=st.integers(1, 4), total=st.booleans(), dtype=st.sampled_from(DTYPES),
       order=st.sampled_from("CF"))
def test_average_is_a_reshape_mean_over_groups_of_sections(shape, group, total, dtype, order):
    axis = 0 if shape[0] > 1 else 1
    if group > shape[axis]:
        with pytest.raises(ParameterError, match=f"group: {group} is more than the {shape[axis]} section"):
            noa.average(values(shape, dtype), group)
        return
    data = values(shape, dtype)
    got = noa.average(as_array(data, order), group, total=total).numpy()
    n = shape[axis] // group
    kept = np.take(data, range(n * group), axis=axis)
    wide = kept.astype(np.complex128 if data.dtype.kind == "c" else np.float64)
    grouped = wide.reshape(shape[:axis] + (n, group) + shape[axis + 1:])
    expected = grouped.sum(axis=axis + 1) if total else grouped.mean(axis=axis + 1)
    assert got.dtype == (np.dtype(dtype) if dtype in ("float64", "complex64") else np.float32)
    np.testing.assert_allclose(got, expected.astype(got.dtype), rtol=1e-5, atol=1e-4)


def test_stack_functions_accept_numpy_and_refuse_vector_elements():
    from noa_core.errors import DTypeError

    assert noa.flip(np.arange(6, dtype=np.float32).reshape(2, 3), "x").numpy().reshape(2, 3)[0].tolist() == [2, 1, 0]
    with pytest.raises(DTypeError):
        noa.flip(noa.zeros((2, 1, 1, 1), dtype=noa.vector("float32", 3)), "x")


# -- headers from Python: what the command writes ------------------------------------------------------------


def _volume(path):
    """A volume with an anisotropic pixel size, an origin and start indices to carry."""
    with mrcfile.new(path, values((17, 20, 23))) as f:
        f.voxel_size = (1.1, 1.2, 1.5)  # X, Y, Z
        f.header.origin = (5.0, -4.0, 3.0)
        f.header.nxstart, f.header.nystart, f.header.nzstart = -11, -10, -8
    return path


def _header(path) -> dict:
    """What mrcfile reads of a header, but for the labels and statistics (the command's own words)."""
    with mrcfile.open(path, permissive=True) as f:
        h = f.header
        return {"shape": f.data.shape, "voxel_size": f.voxel_size.tolist(), "origin": h.origin.tolist(),
                "start": (int(h.nxstart), int(h.nystart), int(h.nzstart)),
                "sampling": (int(h.mx), int(h.my), int(h.mz)),
                "cell": h.cella.tolist(), "ispg": int(h.ispg), "exttyp": bytes(h.exttyp),
                "extended": f.extended_header.tobytes()}


# (input, the Python call on an (array, metadata) pair, the same command's arguments)
HEADER_CASES = {
    "bin depth": ("volume", lambda x: noa.bin_voxels(x, 2, depth=True), ["bin", "--factor", "2", "--depth"]),
    "bin records": ("stack", lambda x: noa.bin_voxels(x, 2), ["bin", "--factor", "2"]),
    "rescale": ("volume", lambda x: noa.rescale(x, 0.6), ["rescale", "--factor", "0.6"]),
    "rescale to a pixel size like relion": ("stack", lambda x: noa.rescale(x, pixel_size=2.0, like="relion"),
                                            ["rescale", "--pixel-size", "2", "--like", "relion"]),
    "resize": ("volume", lambda x: noa.resize(x, (12, 30, 16), fill="zero"),
               ["resize", "--shape", "12,30,16", "--fill", "zero"]),
    "flip z": ("volume", lambda x: noa.flip(x, "z", about="centre"), ["flip", "--axis", "z", "--about", "centre"]),
    "rotx": ("volume", noa.rotx, ["rotx"]),
    "permute": ("volume", lambda x: noa.Image(*x).permute((0, 2, 3, 1)), ["permute", "--axes", "0,2,3,1"]),
    "sections": ("stack", lambda x: noa.sections(x, keep="2,0"), ["sections", "--keep", "2,0"]),
    "average": ("volume", lambda x: noa.average(x, 4), ["average", "--group", "4"]),
}


@pytest.mark.parametrize("case", HEADER_CASES)
def test_an_operation_on_a_pair_returns_the_header_the_command_writes(tmp_path, case):
    """Issue 40 item 5: `b = noa.bin_voxels(vol, 2, depth=True); io.write("b.mrc", b, meta)` wrote the input's pixel
    size (the command writes twice it). Given io.read's (array, metadata), an operation returns the header its
    command derives (one rule for both): pixel size, origin, start, sampling, cell and extended-header records as
    mrcfile reads both files."""
    kind, call, command = HEADER_CASES[case]
    src = _volume(tmp_path / "in.mrc") if kind == "volume" else tmp_path / "in.mrcs"
    if kind == "stack":
        fei1_stack(src, sections=4)
    with compute_path.using("numpy"):  # headers are the matter here, not which kernels compute the values
        result = call(io.read(src))
        assert isinstance(result, noa.Image)
        io.write(tmp_path / "python.mrc", *result)
    done = noa_command(command[0], src, tmp_path / "command.mrc", *command[1:])
    assert done.returncode == 0, done.stderr
    assert _header(tmp_path / "python.mrc") == _header(tmp_path / "command.mrc")
    np.testing.assert_allclose(load(tmp_path / "python.mrc"), load(tmp_path / "command.mrc"), rtol=1e-5, atol=1e-5)


def test_split_and_join_of_pairs_carry_the_headers_the_commands_write(tmp_path):
    src = _volume(tmp_path / "in.mrc")
    with compute_path.using("numpy"):
        parts = noa.split(io.read(src), 8)
        for i, part in enumerate(parts):
            io.write(tmp_path / f"python_{i}.mrcs", *part)
        joined = noa.join([io.read(tmp_path / "python_0.mrcs"), io.read(tmp_path / "python_2.mrcs")])
        io.write(tmp_path / "joined.mrcs", *joined)
    assert noa_command("split", src, "--out-dir", tmp_path / "parts", "--every", "8").returncode == 0
    commands = sorted((tmp_path / "parts").iterdir())
    assert len(commands) == len(parts) == 3
    for i, written in enumerate(commands):
        assert _header(tmp_path / f"python_{i}.mrcs") == _header(written)
    assert noa_command("join", commands[0], commands[2], "-o", tmp_path / "command.mrcs").returncode == 0
    assert _header(tmp_path / "joined.mrcs") == _header(tmp_path / "command.mrcs")


def test_a_pair_whose_metadata_is_of_another_shape_is_refused(tmp_path):
    array, meta = io.read(_volume(tmp_path / "in.mrc"))
    smaller = noa.bin_voxels(array, 2)
    assert isinstance(smaller, noa.Array)  # an array alone: an array, as before
    with pytest.raises(ShapeError, match=r"metadata describes shape \(1, 17, 20, 23\), its array has shape"):
        noa.flip((smaller, meta), "x")
    with pytest.raises(ParameterError, match="not both"):
        noa.join([(array, meta), array])
