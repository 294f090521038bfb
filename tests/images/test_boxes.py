"""The in-memory box functions (noa.resize, bin, flip, rotx) and the index arithmetic they share with the file
operations, against NumPy: slicing and np.pad, a reshape-mean, np.flip, np.rot90."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import noa_core as noa
from noa_core.errors import ParameterError, ShapeError, StrideError
from noa_core.images import boxes
from tests.images.arrays import DTYPES, SETTINGS, as_array, shapes, values

volume_shapes = st.tuples(st.integers(1, 3), st.integers(2, 5), st.integers(1, 5), st.integers(1, 5))


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


