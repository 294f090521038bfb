"""noa_core.pictures.drawing: planes read with bounded reads, contrast, colour maps, spectra, PNG/JPEG, the picture.

Oracles: NumPy slicing, np.reshape(...).mean block means and explicit loops, numpy.fft, numpy.histogram,
RELION's --sigma_contrast and PNG level formula transcribed from its source (relion_image_handler's PNG
output is not linked in Debian's build, so it cannot be run here), matplotlib's viridis values, Pillow
decoding, mrcfile writing; bytes read counted at os.preadv on a large sparse file.
"""

from __future__ import annotations

import contextlib
import io as bytes_io
import math
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import tracemalloc
import warnings

import hypothesis.extra.numpy as hnp
import mrcfile
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from helpers import EXAMPLE_MAP, REPO, noa, random_values, write_mrc
from noa_core.errors import ParameterError
from noa_core.io import mapped
from noa_core.pictures import drawing, terminal


def block_means(values: np.ndarray, k: int) -> np.ndarray:
    """k x k block means, partial blocks at the ends over their own pixels: an explicit loop."""
    rows, cols = values.shape
    out = np.empty((-(-rows // k), -(-cols // k)))
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = values[i * k:(i + 1) * k, j * k:(j + 1) * k].astype(np.float64).mean()
    return out


def relion_levels(values: np.ndarray, sigma: float) -> np.ndarray:
    """src/image.cpp getImageContrast (computeStats: mean, sd with n - 1; clip to mean +- sigma sd) then
    src/apps/image_handler.cpp's PNG loop: FLOOR((v - minval) / (range / 255)), transcribed."""
    v = values.astype(np.float64).reshape(-1)
    n = v.size
    avg = v.sum() / n
    var = (np.sum(v * v) / n - avg * avg) * n / (n - 1)
    sd = math.sqrt(abs(var))
    lo, hi = avg - sigma * sd, avg + sigma * sd
    clipped = np.where(v > hi, hi, np.where(v < lo, lo, v))
    step = (hi - lo) / 255
    return np.floor((clipped - lo) / step).astype(np.uint8).reshape(values.shape)


@pytest.fixture()
def volume(tmp_path):
    data = random_values((12, 20, 28), seed=3)
    path = tmp_path / "vol.mrc"
    write_mrc(path, data, voxel_size=2.0)
    return path, data


# -- planes ---------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(shape=hnp.array_shapes(min_dims=3, max_dims=3, min_side=2, max_side=24), data=st.data())
def test_slices_on_every_axis_are_numpy_slices(tmp_path_factory, shape, data):
    values = random_values(shape, seed=1)
    path = tmp_path_factory.mktemp("planes") / "v.mrc"
    write_mrc(path, values)
    for axis, n, take in (("z", shape[0], lambda i: values[i]), ("y", shape[1], lambda i: values[:, i]),
                          ("x", shape[2], lambda i: values[:, :, i])):
        index = data.draw(st.integers(0, n - 1))
        np.testing.assert_array_equal(drawing.read_plane(path, axis=axis, index=index), take(index))
        np.testing.assert_array_equal(drawing.read_plane(path, axis=axis), take(n // 2))  # the centre, N // 2
        assert drawing.plane_shape(path, axis=axis) == take(0).shape


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 40), k=st.integers(1, 7), data=st.data())
def test_block_means_of_a_region_read_in_bands(tmp_path_factory, rows, cols, k, data):
    values = random_values((rows, cols), seed=rows * cols)
    path = tmp_path_factory.mktemp("bins") / "i.mrc"
    write_mrc(path, values)
    y0 = data.draw(st.integers(0, rows - 1))
    y1 = data.draw(st.integers(y0 + 1, rows))
    x0 = data.draw(st.integers(0, cols - 1))
    x1 = data.draw(st.integers(x0 + 1, cols))
    with small_bands():
        got = drawing.read_plane(path, region=(y0, y1, x0, x1), step=k)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, block_means(values[y0:y1, x0:x1], k), rtol=1e-6, atol=1e-6)


@contextlib.contextmanager
def small_bands():
    """Bands of a few rows, so that band edges fall inside every plane."""
    saved = drawing.BAND_BYTES
    drawing.BAND_BYTES = 64
    try:
        yield
    finally:
        drawing.BAND_BYTES = saved


def test_divisible_block_means_are_numpys_reshape_mean(tmp_path):
    values = random_values((48, 64), seed=2)
    write_mrc(tmp_path / "i.mrc", values)
    got = drawing.read_plane(tmp_path / "i.mrc", step=4)
    np.testing.assert_allclose(got, values.reshape(12, 4, 16, 4).mean(axis=(1, 3)), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(drawing.downsample(values, 16), values.reshape(12, 4, 16, 4).mean(axis=(1, 3)),
                               rtol=1e-6, atol=1e-6)


def test_projections_are_means_along_the_axis(volume):
    path, data = volume
    for bands in (small_bands(), contextlib.nullcontext()):
        with bands:
            for axis, mean in (("z", data.mean(0)), ("y", data.mean(1)), ("x", data.mean(2))):
                np.testing.assert_allclose(drawing.read_plane(path, axis=axis, projection=True), mean, rtol=1e-5,
                                           atol=1e-6)
            np.testing.assert_allclose(drawing.read_plane(path, axis="y", projection=True, region=(2, 9, 3, 20),
                                                          step=2), block_means(data.mean(1)[2:9, 3:20], 2),
                                       rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("band_bytes", [64, 2048, drawing.BAND_BYTES])
def test_projections_binned_in_bands_are_numpys_means(volume, band_bytes, monkeypatch):
    """Bands of block rows, each read in pieces of rows or of sections: NumPy's mean along the axis, then block
    means, over every region tried."""
    path, data = volume
    monkeypatch.setattr(drawing, "BAND_BYTES", band_bytes)
    for axis, mean in (("z", data.mean(0, dtype=np.float64)), ("y", data.mean(1, dtype=np.float64)),
                       ("x", data.mean(2, dtype=np.float64))):
        rows, cols = mean.shape
        for region, k in (((0, rows, 0, cols), 1), ((0, rows, 0, cols), 3), ((1, rows - 1, 2, cols), 2),
                          ((2, 7, 3, 11), 4), ((rows - 1, rows, cols - 1, cols), 1)):
            y0, y1, x0, x1 = region
            got = drawing.read_plane(path, axis=axis, projection=True, region=region, step=k)
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, block_means(mean[y0:y1, x0:x1], k), rtol=1e-5, atol=1e-6,
                                       err_msg=f"{axis} {region} {k}")


def test_a_projection_holds_bands_not_the_plane(tmp_path):
    """The z mean of a 4096 x 4096 int8 volume of two sections binned by 16: its float64 plane (128 MiB) is never
    held, only the picture and a few bands (tracemalloc counts NumPy's allocations)."""
    shape = (2, 4096, 4096)
    rng = np.random.default_rng(11)
    with mrcfile.new_mmap(tmp_path / "v.mrc", shape, mrc_mode=0) as f:
        f.data[...] = rng.integers(-128, 128, shape, dtype=np.int8)
        data = np.array(f.data)
    tracemalloc.start()
    try:
        got = drawing.read_plane(tmp_path / "v.mrc", projection=True, step=16)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    sums = data.astype(np.int64).sum(axis=0).reshape(256, 16, 256, 16).sum(axis=(1, 3))
    np.testing.assert_array_equal(got, (sums / (2 * 16 * 16)).astype(np.float32))  # exact: halves over 2^9
    assert peak < 4 * drawing.BAND_BYTES, f"{peak >> 20} MiB held for a 256 x 256 projection"


def test_a_stacks_sections_and_complex_moduli(tmp_path):
    stack = random_values((3, 8, 10), "complex64", seed=4)
    with mrcfile.new(tmp_path / "s.mrcs", stack) as f:
        f.set_image_stack()
    np.testing.assert_allclose(drawing.read_plane(tmp_path / "s.mrcs", section=2), np.abs(stack[2]), rtol=1e-6)
    with pytest.raises(ParameterError, match="section"):
        drawing.read_plane(tmp_path / "s.mrcs", section=3)
    with pytest.raises(ParameterError, match="axis"):
        drawing.read_plane(tmp_path / "s.mrcs", axis="x")
    # the same file read as a volume: its sections are z slices
    np.testing.assert_allclose(drawing.read_plane(tmp_path / "s.mrcs", axis="y", index=1,
                                                  reading={"as_stack": False}), np.abs(stack[:, 1]), rtol=1e-6)


def test_bad_regions_and_indices_name_the_parameter(volume):
    path, _ = volume
    for kwargs, name in (({"region": (0, 0, 0, 5)}, "region"), ({"region": (0, 5, 0, 29)}, "region"),
                         ({"index": 12}, "index"), ({"axis": "w"}, "axis"), ({"step": 0}, "step")):
        with pytest.raises(ParameterError) as caught:
            drawing.read_plane(path, **kwargs)
        assert caught.value.param == name


@pytest.fixture()
def counted_reads(monkeypatch):
    """Bytes read from mapped inputs (read_view's pread), summed."""
    read = {"bytes": 0}
    real = mapped.os.preadv

    def counting(fd, buffers, offset):
        got = real(fd, buffers, offset)
        read["bytes"] += got
        return got

    monkeypatch.setattr(mapped.os, "preadv", counting)
    return read


def test_only_what_is_drawn_is_read_from_a_large_volume(tmp_path, counted_reads):
    shape = (256, 1024, 1024)  # 1 GiB of float32, sparse on disk: reading it whole would be seen at once
    with mrcfile.new_mmap(tmp_path / "big.mrc", shape, mrc_mode=2) as f:
        f.data[128, 3, 7] = 5.0
        f.voxel_size = 1.0
    plane = 1024 * 1024 * 4
    z = drawing.read_plane(tmp_path / "big.mrc")
    assert z.shape == (1024, 1024) and z[3, 7] == 5.0
    assert counted_reads["bytes"] == plane
    counted_reads["bytes"] = 0
    y = drawing.read_plane(tmp_path / "big.mrc", axis="y", index=3, step=4)
    assert y.shape == (64, 256) and y[32, 1] == pytest.approx(5.0 / 16)
    assert counted_reads["bytes"] == 256 * 1024 * 4  # a row of each section
    counted_reads["bytes"] = 0
    small = drawing.read_plane(tmp_path / "big.mrc", region=(0, 16, 0, 16))
    assert small[3, 7] == 5.0 and counted_reads["bytes"] <= 16 * 1024 * 4
    counted_reads["bytes"] = 0
    picture = drawing.preview(tmp_path / "big.mrc", size=256, axis="z")  # the XY slice, binned by 4
    assert picture.shape == (256, 256) and counted_reads["bytes"] == plane


@pytest.mark.parametrize("dtype", ["<f4", ">f4", "<i2", "int8", "<u2", "<f2", "<c8"])
def test_x_slices_read_value_by_value_are_mrcfiles(tmp_path, dtype):
    """A volume of odd sizes whose rows are over mapped.SPACED_BYTES (its x slices are read value by value): every
    x slice tried, binned k x k in bands of one block row or of the whole plane, is NumPy's block means of
    mrcfile's values (moduli of complex ones), in every mode and byte order; the central slices picture too."""
    dt = np.dtype(dtype)
    shape = (7, 45, mapped.SPACED_BYTES // dt.itemsize + 5)
    write_mrc(tmp_path / "v.mrc", random_values(shape, dt.newbyteorder("=")).astype(dt))
    with mrcfile.open(tmp_path / "v.mrc") as f:
        assert f.data.dtype == dt
        values = np.abs(np.array(f.data)) if dt.kind == "c" else np.array(f.data)
    for bands in (small_bands(), contextlib.nullcontext()):
        with bands:
            for index, k in ((0, 1), (shape[2] // 2, 2), (shape[2] - 1, 3)):
                got = drawing.read_plane(tmp_path / "v.mrc", axis="x", index=index, step=k)
                np.testing.assert_allclose(got, block_means(values[:, :, index], k), rtol=1e-6, atol=1e-6,
                                           err_msg=f"x={index} k={k}")
    slices = [values[shape[0] // 2], values[:, shape[1] // 2], values[:, :, shape[2] // 2]]
    lo, hi = drawing.contrast_limits(np.concatenate([v.astype(np.float32).reshape(-1) for v in slices]))
    picture = drawing.preview(tmp_path / "v.mrc", size=4096, bin=1)
    left = 2 * (shape[2] + drawing.GAP)  # after the XY and XZ panels
    yz = picture[:shape[0], left:left + shape[1]]
    np.testing.assert_array_equal(yz, drawing.to_gray(slices[2].astype(np.float32), lo, hi))


def test_a_slice_drawn_as_it_is_is_read_straight_into_the_answer(tmp_path):
    """A z slice of 4 MiB at step 1 is read from the file into the array returned: mrcfile's values, and nothing
    else as large held on the way (it was read into a band buffer a thread, then copied)."""
    data = write_mrc(tmp_path / "v.mrc", random_values((3, 1024, 1024), seed=4))
    with mapped.scratch_buffers():  # this thread's read buffers, made by earlier reads, freed: they would count
        pass
    tracemalloc.start()
    try:
        got = drawing.read_plane(tmp_path / "v.mrc", index=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(got, data[1])
    assert peak < got.nbytes + (256 << 10), f"{peak >> 10} KiB held for a {got.nbytes >> 10} KiB slice"


def test_planes_binned_in_bands_share_threads_started_once(tmp_path, monkeypatch):
    """Bands are averaged by threads started once for the process (starting them for each plane cost the viewer a
    millisecond a thread on a busy machine): four binned reads of planes of eight bands, two cores, start two
    threads at most; each read is NumPy's block means of mrcfile's values."""
    data = write_mrc(tmp_path / "v.mrc", random_values((2, 16, 40), seed=6))
    monkeypatch.setattr(drawing.limits, "available_cores", lambda: 2)
    drawing._band_threads.cache_clear()
    started = []
    start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda thread: (started.append(thread.name), start(thread))[1])
    try:
        with small_bands():
            for index in (0, 1, 0, 1):
                got = drawing.read_plane(tmp_path / "v.mrc", index=index, step=2)
                np.testing.assert_allclose(got, block_means(data[index], 2), rtol=1e-6)
    finally:
        drawing._band_threads.cache_clear()
    assert len(started) <= 2, started


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX's")
def test_a_forked_child_bins_planes_with_threads_of_its_own(tmp_path, monkeypatch):
    """A process forked after its parent binned a plane (its band threads started) bins planes too: the child has
    none of the parent's threads, so it starts its own (else its bands would wait for threads that are not there)."""
    data = write_mrc(tmp_path / "v.mrc", random_values((16, 40), seed=7))
    monkeypatch.setattr(drawing.limits, "available_cores", lambda: 2)
    with small_bands():
        drawing.read_plane(tmp_path / "v.mrc", step=2)  # the parent's threads started
        child = multiprocessing.get_context("fork").Process(target=_bin_and_save, args=(tmp_path,))
        child.start()
        child.join(60)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0, "the child did not finish binning"
    np.testing.assert_allclose(np.load(tmp_path / "binned.npy"), block_means(data, 2), rtol=1e-6)


def _bin_and_save(folder) -> None:
    with small_bands():
        np.save(folder / "binned.npy", drawing.read_plane(folder / "v.mrc", step=2))


def test_an_x_slice_holds_its_values_not_the_rows_they_are_in(tmp_path):
    """The x slice of a 64 MiB volume (256 KiB of values, one a 4 KiB row) is read value by value: what is held
    at once is its values and their float64 means, not the bands of rows they lie in (tracemalloc counts NumPy's
    allocations)."""
    shape = (64, 256, 1024)
    with mrcfile.new_mmap(tmp_path / "v.mrc", shape, mrc_mode=2) as f:
        for z in range(shape[0]):
            f.data[z] = np.arange(shape[1] * shape[2], dtype=np.float32).reshape(shape[1:]) + z
    tracemalloc.start()
    try:
        got = drawing.read_plane(tmp_path / "v.mrc", axis="x", index=700)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    expected = np.arange(shape[1], dtype=np.float32)[None, :] * shape[2] + 700 + np.arange(shape[0])[:, None]
    np.testing.assert_array_equal(got, expected)
    assert peak < 8 * got.nbytes + (1 << 20), f"{peak >> 10} KiB held for a {got.nbytes >> 10} KiB slice"


# -- values to pixels ---------------------------------------------------------------------------------


def test_sigma_contrast_and_levels_are_relions():
    values = random_values((30, 40), "float64", seed=5, sd=3.0)
    values[0, 0] = 50.0  # clipped
    lo, hi = drawing.contrast_limits(values, "sigma:3")
    mean, sd = values.mean(), values.std(ddof=1)
    assert (lo, hi) == pytest.approx((mean - 3 * sd, mean + 3 * sd), rel=1e-12)
    np.testing.assert_array_equal(drawing.to_gray(values, lo, hi), relion_levels(values, 3.0))
    np.testing.assert_array_equal(drawing.to_gray(values, lo, hi, invert=True), 255 - relion_levels(values, 3.0))


def test_a_planes_contrast_and_levels_hold_no_float64_copy_of_it():
    """The viewer's 1024² float32 picture at sigma contrast: limits and levels are NumPy's and RELION's (its formula,
    transcribed) while what is held at once stays near the levels themselves, not the 8 MiB float64 copies of the
    plane they were made through (tracemalloc counts NumPy's allocations)."""
    values = random_values((1024, 1024), seed=11, sd=2.0)
    values[0, :8] = 40.0  # clipped
    tracemalloc.start()
    try:
        lo, hi = drawing.contrast_limits(values, "sigma:3")
        gray = drawing.to_gray(values, lo, hi)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    wide = values.astype(np.float64)
    assert (lo, hi) == pytest.approx((wide.mean() - 3 * wide.std(ddof=1), wide.mean() + 3 * wide.std(ddof=1)),
                                     rel=1e-12)
    np.testing.assert_array_equal(gray, relion_levels(values, 3.0))
    assert peak < gray.nbytes + (1 << 20), f"{peak >> 10} KiB held for a {gray.nbytes >> 10} KiB picture"


def test_the_other_contrasts():
    values = np.arange(101, dtype=np.float64)
    assert drawing.contrast_limits(values, "minmax") == (0.0, 100.0)
    assert drawing.contrast_limits(values, "percentiles:5,95") == pytest.approx(tuple(np.percentile(values, [5, 95])))
    assert drawing.contrast_limits(values, "range:-2,7.5") == (-2.0, 7.5)
    lo, hi = drawing.contrast_limits(np.full(9, 4.0), "sigma:3")
    assert lo < 4.0 < hi
    gray = drawing.to_gray(np.array([-5.0, 0.0, 50.0, 100.0, 200.0]), 0.0, 100.0)
    np.testing.assert_array_equal(gray, [0, 0, 127, 255, 255])


def test_non_finite_values_are_left_out_of_the_limits_and_counted(tmp_path):
    values = random_values((16, 20), seed=9)
    values[3, 4], values[5, 6], values[7, 8] = np.nan, np.inf, -np.inf
    write_mrc(tmp_path / "nan.mrc", values)
    finite = values[np.isfinite(values)].astype(np.float64)
    oracle = {"sigma:3": (finite.mean() - 3 * finite.std(ddof=1), finite.mean() + 3 * finite.std(ddof=1)),
              "percentiles:2,98": tuple(np.percentile(finite, [2, 98])), "minmax": (finite.min(), finite.max())}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning from NumPy on the way
        for contrast, (lo, hi) in oracle.items():
            assert drawing.contrast_limits(values, contrast) == pytest.approx((lo, hi), rel=1e-12)
            picture = drawing.preview(tmp_path / "nan.mrc", contrast=contrast)
            levels = np.floor((np.clip(values.astype(np.float64), lo, hi) - lo) / ((hi - lo) / 255))
            levels[3, 4] = 0  # NaN: black; the infinities clip
            np.testing.assert_array_equal(picture, levels.astype(np.uint8), err_msg=contrast)
            assert (picture[5, 6], picture[7, 8]) == (255, 0)
        drawn = drawing.draw(tmp_path / "nan.mrc")
        assert (drawn.count, drawn.non_finite) == (320, 3)
        binned = drawing.draw(tmp_path / "nan.mrc", bin=2)  # each in a 2 x 2 block of its own: 3 of 80 blocks
        assert (binned.count, binned.non_finite) == (80, 3)
        assert drawing.contrast_limits(np.full(4, np.nan)) == (0.0, 1.0)


@pytest.mark.parametrize("spec", ["sigma", "sigma:0", "sigma:x", "percentiles:9,1", "percentiles:1",
                                  "minmax:3", "range:5,5", "range:1,inf", "gamma:2"])
def test_bad_contrasts_are_refused_naming_contrast(spec):
    with pytest.raises(ParameterError) as caught:
        drawing.contrast_limits(np.arange(4.0), spec)
    assert caught.value.param == "contrast"


def test_colour_maps():
    gray = np.arange(256, dtype=np.uint8).reshape(16, 16)
    np.testing.assert_array_equal(drawing.colorize(gray, "gray"), gray)
    x = np.arange(256) / 255
    fire = np.rint(np.stack([np.clip(3 * x, 0, 1), np.clip(3 * x - 1, 0, 1), np.clip(3 * x - 2, 0, 1)], -1) * 255)
    np.testing.assert_array_equal(drawing.colorize(gray, "fire").reshape(256, 3), fire)
    np.testing.assert_array_equal(drawing.colorize(gray, "ice").reshape(256, 3), fire[:, ::-1])
    # matplotlib's viridis (its _viridis_data x 255, rounded) at a few levels
    viridis = {0: (68, 1, 84), 64: (59, 82, 139), 128: (33, 145, 140), 192: (94, 201, 98), 255: (253, 231, 37)}
    table = drawing.colour_table("viridis")
    for level, rgb in viridis.items():
        assert np.abs(table[level].astype(int) - rgb).max() <= 2, (level, table[level], rgb)
    with pytest.raises(ParameterError, match="cmap"):
        drawing.colorize(gray, "jet")


def test_log_spectrum_is_numpys():
    image = random_values((24, 30), seed=6)
    expected = np.log(np.fft.fftshift(np.abs(np.fft.fft2(image.astype(np.float64))) ** 2) / image.size)
    got = drawing.log_spectrum(image)
    assert got.shape == image.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_histogram_is_numpys():
    values = random_values((20, 20), seed=7)
    counts, edges = drawing.histogram(values, 17)
    want_counts, want_edges = np.histogram(values.astype(np.float64), bins=17)
    np.testing.assert_array_equal(counts, want_counts)
    np.testing.assert_allclose(edges, want_edges)


def test_encoded_pictures_decode_with_pillow():
    gray = np.random.default_rng(8).integers(0, 256, (20, 30), dtype=np.uint8)
    rgb = drawing.colorize(gray, "viridis")
    for pixels in (gray, rgb):
        decoded = np.asarray(Image.open(bytes_io.BytesIO(drawing.encode(pixels, "png"))))
        np.testing.assert_array_equal(decoded, pixels)
    smooth = np.tile(np.arange(0, 240, 8, dtype=np.uint8), (20, 1))
    jpeg = Image.open(bytes_io.BytesIO(drawing.encode(smooth, "jpeg", quality=95)))
    assert jpeg.format == "JPEG" and jpeg.mode == "L"
    assert np.abs(np.asarray(jpeg).astype(int) - smooth).max() <= 6
    with pytest.raises(ParameterError, match="format"):
        drawing.encode(gray, "gif")


def test_a_fast_png_is_compressed_only_where_it_pays():
    """The viewer's PNG: a noisy picture is stored (zlib would save 2% for ten times the time), a smooth one
    compressed; both decode with Pillow to the pixels given."""
    noisy = np.clip(np.random.default_rng(9).normal(128, 40, (512, 512)), 0, 255).astype(np.uint8)
    smooth = (np.add.outer(np.arange(512), np.arange(512)) // 8 % 256).astype(np.uint8)
    for pixels, most in ((noisy, None), (smooth, 0.2)):
        encoded = drawing.encode(pixels, "png", fast=True)
        np.testing.assert_array_equal(np.asarray(Image.open(bytes_io.BytesIO(encoded))), pixels)
        if most is None:  # stored: zlib's stored blocks add a few bytes a 64 KiB to the filtered rows
            assert len(encoded) >= pixels.nbytes
        else:
            assert len(encoded) < most * pixels.nbytes


# -- the picture ------------------------------------------------------------------------------------


def half_block_text(picture: np.ndarray) -> str:
    """The escape sequences of noa's terminal pictures written out cell by cell (a cell: the pixel above as the
    glyph's colour, the one below as the background, or the terminal's own below an odd last row)."""
    rgb = np.repeat(picture[..., None], 3, axis=2) if picture.ndim == 2 else picture
    lines = []
    for top in range(0, rgb.shape[0], 2):
        cells = []
        for x in range(rgb.shape[1]):
            r, g, b = (int(v) for v in rgb[top, x])
            below = "\x1b[49m" if top + 1 == rgb.shape[0] else "\x1b[48;2;{};{};{}m".format(*map(int, rgb[top + 1, x]))
            cells.append(f"\x1b[38;2;{r};{g};{b}m{below}\u2580")
        lines.append("".join(cells) + "\x1b[0m\n")
    return "".join(lines)


@pytest.mark.parametrize("cells", [3, 7, terminal.BAND_CELLS])
def test_terminal_text_is_the_escape_sequences_cell_by_cell(cells, monkeypatch):
    monkeypatch.setattr(terminal, "BAND_CELLS", cells)  # bands that end inside the picture
    rng = np.random.default_rng(12)
    pictures_ = [rng.integers(0, 256, shape, dtype=np.uint8) for shape in
                 ((1, 1), (1, 5), (2, 3), (5, 4), (6, 9, 3), (7, 2, 3), (0, 4))]
    pictures_.append(np.array([[0, 9, 10, 99, 100, 255]], np.uint8))  # every count of digits
    for picture in pictures_:
        assert "".join(terminal.half_blocks(picture)) == half_block_text(picture), picture.shape


def test_terminal_text_is_made_a_band_at_a_time():
    """A 1024 x 2048 colour picture's text (75 MB as a string) given in pieces: memory stays within one band's,
    which the preview's memory check counts (terminal.band_bytes)."""
    picture = np.random.default_rng(13).integers(0, 256, (1024, 2048, 3), dtype=np.uint8)
    tracemalloc.start()
    try:
        characters = sum(len(piece) for piece in terminal.half_blocks(picture))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert characters > 512 * 2048 * 30  # every cell: two colours of 3 numbers each and the glyph
    assert peak <= terminal.band_bytes(2048), f"{peak >> 20} MiB held"


def test_three_central_slices_side_by_side(volume):
    path, data = volume
    picture = drawing.preview(path, contrast="minmax")
    d, h, w = data.shape
    gap = drawing.GAP
    assert picture.shape == (max(h, d), w + gap + w + gap + h)
    xy, xz, yz = data[d // 2], data[:, h // 2], data[:, :, w // 2]
    drawn = np.concatenate([xy.reshape(-1), xz.reshape(-1), yz.reshape(-1)])
    lo, hi = float(drawn.min()), float(drawn.max())

    def levels(v):
        return np.floor((v.astype(np.float64) - lo) / ((hi - lo) / 255)).astype(np.uint8)

    np.testing.assert_array_equal(picture[:h, :w], levels(xy))
    np.testing.assert_array_equal(picture[:d, w + gap:2 * w + gap], levels(xz))
    np.testing.assert_array_equal(picture[:d, 2 * w + 2 * gap:], levels(yz))
    assert not picture[h:, :w].any() and not picture[:, w:w + gap].any()  # black background


def test_size_bounds_the_longest_side_by_block_means(volume):
    path, data = volume
    picture = drawing.preview(path, axis="z", index=2, size=7, contrast="range:-1,1")
    assert picture.shape == (5, 7)  # k = 4: ceil(20 / 4) x ceil(28 / 4)
    np.testing.assert_array_equal(picture, drawing.to_gray(block_means(data[2], 4), -1.0, 1.0))


def test_montage_layout_every_and_columns(tmp_path):
    stack = np.stack([np.full((6, 8), float(i), np.float32) for i in range(7)])
    write_mrc(tmp_path / "s.mrcs", stack, stack=True)
    picture = drawing.preview(tmp_path / "s.mrcs", montage=True, every=2, columns=3, contrast="range:0,6")
    gap = drawing.GAP
    assert picture.shape == (6 * 2 + gap, 8 * 3 + gap * 2)  # sections 0, 2, 4, 6 on 2 rows of 3
    for n, section in enumerate((0, 2, 4, 6)):
        r, c = divmod(n, 3)
        cell = picture[r * (6 + gap):r * (6 + gap) + 6, c * (8 + gap):c * (8 + gap) + 8]
        assert (cell == math.floor(section / (6 / 255))).all(), (section, cell[0, 0])


def shuffled_particles(folder, order: list[int]):
    """A copy of RELION's particle set (tests/data/relion_particles) in ``folder`` whose particles STAR lists its
    rows in ``order`` (the images' rows interleaved across the two stacks)."""
    shutil.copytree(REPO / "tests" / "data" / "relion_particles", folder)
    lines = (folder / "particles.star").read_text().splitlines(keepends=True)
    rows = [i for i, line in enumerate(lines) if "@Particles/" in line]
    assert len(rows) == len(order)
    reordered = list(lines)
    for at, source in zip(rows, order):
        reordered[at] = lines[rows[source]]
    (folder / "particles.star").write_text("".join(reordered))
    return folder / "particles.star"


def test_a_particle_star_montage_is_its_rows_images_in_row_order(tmp_path):
    """noa preview particles.star montage.png --montage: panel n is row n's image (N@stack read by mrcfile), as the
    montage of a stack is (the oracle of the montage test above)."""
    star_path = shuffled_particles(tmp_path / "project", order=[6, 0, 10, 3, 1, 9, 2, 8, 4, 7, 5])
    result = noa("preview", "particles.star", tmp_path / "montage.png", "--montage", "--columns", "4", "--bin", "1",
                 "--contrast", "minmax", cwd=star_path.parent)
    assert result.returncode == 0, result.stderr
    images = []
    for line in star_path.read_text().splitlines():
        if "@Particles/" in line:
            index, stack = line.split()[2].split("@")
            with mrcfile.open(star_path.parent / stack) as m:
                images.append(m.data[int(index) - 1].astype(np.float64))
    lo, hi = min(i.min() for i in images), max(i.max() for i in images)
    picture = np.asarray(Image.open(tmp_path / "montage.png"))
    gap = drawing.GAP
    assert picture.shape == (3 * 32 + 2 * gap, 4 * 32 + 3 * gap)  # 11 particles on 3 rows of 4
    for n, image in enumerate(images):
        r, c = divmod(n, 4)
        cell = picture[r * (32 + gap):r * (32 + gap) + 32, c * (32 + gap):c * (32 + gap) + 32]
        np.testing.assert_array_equal(cell, np.floor((image - lo) / ((hi - lo) / 255)), err_msg=f"row {n + 1}")


def test_flip_y_puts_row_0_at_the_bottom(tmp_path):
    image = np.zeros((16, 20), np.float32)
    image[0, 0] = 1.0  # MRC row 0, the first stored: the top by default, the bottom in IMOD's view
    write_mrc(tmp_path / "corner.mrc", image)
    top = drawing.preview(tmp_path / "corner.mrc", contrast="minmax")
    bottom = drawing.preview(tmp_path / "corner.mrc", contrast="minmax", flip_y=True)
    assert top[0, 0] == 255 and top.sum() == 255
    assert bottom[15, 0] == 255 and bottom.sum() == 255


def test_scale_bar_is_drawn_where_the_pixel_size_is_known(tmp_path):
    write_mrc(tmp_path / "flat.mrc", np.zeros((64, 64), np.float32), voxel_size=3.0)
    picture = drawing.preview(tmp_path / "flat.mrc", scale_bar=True, contrast="range:0,1")
    length, pixels, label = drawing.scale_bar_length(64, 3.0)
    assert (length, pixels, label) == (20.0, 7, "20 Å")  # 64 x 3 / 4 = 48 Å -> 20 Å, 7 pixels
    y0, y1, x0, x1 = drawing.scale_bar_box(0, 0, 64, 64, pixels)
    assert (picture[y0:y1, x0:x1] == 255).all()
    assert picture[y1:, :].max() == 0 and picture[y0:y1, x1:].max() == 0  # nothing right of or below the bar
    assert picture[:y0].max() > 200 and (picture[:y0] > 0).sum() > 10  # its label above it (antialiased text)
    assert drawing.scale_bar_length(1000, 1.06)[2] == "20 nm"
    write_mrc(tmp_path / "unknown.mrc", np.zeros((16, 16), np.float32))
    with pytest.raises(ParameterError, match="pixel size is unknown") as caught:
        drawing.preview(tmp_path / "unknown.mrc", scale_bar=True)
    assert caught.value.param == "scale_bar"
    assert drawing.preview(tmp_path / "unknown.mrc", scale_bar=True, pixel_size=2.0).shape == (16, 16)


def test_a_small_picture_is_magnified_by_a_whole_factor_to_fit_the_size(volume):
    """Issue 40 item 8: a 100^3 map's picture was 308 x 100 pixels. magnify draws each value m x m pixels (nearest
    neighbour), m the largest whole number whose picture fits the size; bin sets the scale instead."""
    path, data = volume
    d, h, w = data.shape
    gap = drawing.GAP
    plain = drawing.preview(path, contrast="minmax")
    panels = [(plain[:h, :w], 0), (plain[:d, w + gap:2 * w + gap], w + gap),
              (plain[:d, 2 * w + 2 * gap:], 2 * w + 2 * gap)]
    for size, m in ((1024, (1024 - 2 * gap) // (2 * w + h)), (300, (300 - 2 * gap) // (2 * w + h))):
        magnified = drawing.preview(path, contrast="minmax", magnify=True, size=size)
        assert m > 1 and magnified.shape == (max(h, d) * m, (2 * w + h) * m + 2 * gap), (size, magnified.shape)
        assert magnified.shape[1] + 2 * w + h > size  # one more would not fit
        left = 0
        for panel, _ in panels:  # each value an m x m square (np.kron), the panels GAP pixels apart on black
            rows, cols = panel.shape
            np.testing.assert_array_equal(magnified[:rows * m, left:left + cols * m], np.kron(panel, np.ones((m, m))))
            assert not magnified[rows * m:, left:left + cols * m].any()
            assert not magnified[:, left + cols * m:left + cols * m + gap].any()
            left += cols * m + gap
    assert drawing.preview(path, contrast="minmax", magnify=True, bin=1).shape == plain.shape
    assert drawing.preview(path, contrast="minmax", magnify=True, size=16).shape == drawing.preview(
        path, contrast="minmax", size=16).shape  # a picture binned to fit is not magnified


def text_pixels(text: str, size: int, stroke: int, anchor: str, shape: tuple[int, int], at: tuple[int, int]):
    """``text`` as Pillow draws it, white outlined in black, on a black picture of ``shape``: the oracle of the
    labels (the same font, noa's drawing.font: DejaVu Sans, or Pillow's bundled one)."""
    from PIL import ImageDraw

    image = Image.new("L", shape[::-1])
    ImageDraw.Draw(image).text(at, text, fill=255, font=drawing.font(size), anchor=anchor, stroke_width=stroke,
                               stroke_fill=0)
    return np.asarray(image)


def test_the_scale_bar_label_is_readable_on_a_small_map(tmp_path):
    """Issue 40 item 8: on a 100^3 map (1 Å) the label "50 Å" was 5 x 7 pixels. Magnified, the first panel is
    300 pixels: its label is 300 // 16 = 18 pixels high, the text Pillow draws at that size."""
    write_mrc(tmp_path / "map100.mrc", np.zeros((100, 100, 100), np.float32), voxel_size=1.0)
    picture = drawing.preview(tmp_path / "map100.mrc", scale_bar=True, contrast="range:0,1", magnify=True)
    assert picture.shape == (300, 3 * 300 + 2 * drawing.GAP)
    length, pixels, label = drawing.scale_bar_length(300, 1 / 3)
    assert (length, pixels) == (20.0, 60)  # 300 x 1/3 / 4 = 25 Å -> 20 Å: 60 pixels of a third of an Å
    y0, y1, x0, x1 = drawing.scale_bar_box(0, 0, 300, 300, pixels)
    assert (picture[y0:y1, x0:x1] == 255).all()
    size = drawing.text_size(300, 300)
    assert size == 18
    typeface = drawing.font(size)
    written = label if drawing.has_glyph(typeface, "Å") else drawing.length_label(length, False)
    above = picture[:y0, :300]
    want = text_pixels(written, size, drawing.text_stroke(300, 300), "ld", above.shape, (x0, y0 - 2))
    np.testing.assert_array_equal(above, want)
    ink = np.argwhere(above == 255)
    assert np.ptp(ink[:, 0]) + 1 >= 12 and np.ptp(ink[:, 1]) + 1 >= 24, np.ptp(ink, axis=0)  # readable, not 5 x 7
    assert not picture[:, 300:].any()  # nothing on the other panels


def test_panel_labels_name_the_planes_and_the_sections(tmp_path):
    """Issue 40 item 8: no panel labels. labels writes XY, XZ, YZ on a volume's central slices, the plane and slice
    on one slice, the section on a montage: each at its panel's top left, Pillow's text."""
    write_mrc(tmp_path / "vol.mrc", np.zeros((12, 20, 28), np.float32))
    picture = drawing.preview(tmp_path / "vol.mrc", labels=True, contrast="range:0,1", magnify=True, size=600)
    layout = drawing.plan_layout((1, 12, 20, 28), magnify=True, size=600)
    assert [p.label for p in layout.panels] == ["XY", "XZ", "YZ"]
    drawn = np.zeros_like(picture)
    for panel in layout.panels:
        rows, cols = layout.panel_shape(panel)
        margin = drawing.text_margin(cols)
        drawn[panel.top:panel.top + rows, panel.left:panel.left + cols] = text_pixels(
            panel.label, drawing.text_size(rows, cols), drawing.text_stroke(rows, cols), "lt", (rows, cols),
            (margin, margin))
        assert (drawn[panel.top:panel.top + rows, panel.left:panel.left + cols] > 128).sum() > 20
    np.testing.assert_array_equal(picture, drawn)
    assert not drawing.preview(tmp_path / "vol.mrc", contrast="range:0,1", magnify=True, size=600).any()

    one = drawing.plan_layout((1, 12, 20, 28), axis="y", index=3)
    assert [p.label for p in one.panels] == ["XZ y=3"]
    assert [p.label for p in drawing.plan_layout((1, 12, 20, 28), projection="x").panels] == ["YZ mean"]
    montage = drawing.plan_layout((1, 12, 20, 28), montage=True, every=5)
    assert [p.label for p in montage.panels] == ["0", "5", "10"]
    assert [p.label for p in drawing.plan_layout((4, 1, 20, 28), section=2).panels] == ["2"]
    assert [p.label for p in drawing.plan_layout((1, 1, 20, 28)).panels] == [""]  # a lone image: nothing to say
    stack = drawing.preview(tmp_path / "vol.mrc", labels=True, montage=True, every=5, contrast="range:0,1")
    for panel in montage.panels:
        rows, cols = montage.panel_shape(panel)
        cell = stack[panel.top:panel.top + rows, panel.left:panel.left + cols]
        np.testing.assert_array_equal(cell, text_pixels(panel.label, 12, 1, "lt", (rows, cols), (2, 2)))


def test_spectrum_panel_and_colour(volume):
    path, data = volume
    picture = drawing.preview(path, axis="z", spectrum=True, contrast="minmax", cmap="fire")
    spectrum = np.log(np.fft.fftshift(np.abs(np.fft.fft2(data[6].astype(np.float64))) ** 2) / data[6].size)
    lo, hi = float(spectrum.min()), float(spectrum.max())
    want = drawing.colour_table("fire")[drawing.to_gray(spectrum, lo, hi)]
    assert picture.shape == (20, 28, 3)
    assert np.abs(picture.astype(int) - want).max() <= 3  # float32 logs against float64 near a level's edge


def test_the_bundled_map_draws(tmp_path):
    picture = drawing.preview(EXAMPLE_MAP, scale_bar=True, size=64, cmap="viridis")
    assert picture.shape[2] == 3 and max(picture.shape[:2]) <= 64


def test_layouts_are_bounded_before_anything_is_built():
    with pytest.raises(ParameterError, match="at most 10000") as caught:
        drawing.plan_layout((20_001, 1, 16, 16), montage=True)
    assert caught.value.param == "every"
    assert len(drawing.plan_layout((20_001, 1, 16, 16), montage=True, every=3, size=16_384).panels) == 6667
    with pytest.raises(ParameterError, match="more than the") as caught:
        drawing.plan_layout((1, 1, 20_000, 20_000), bin=1)
    assert caught.value.param == "bin"
    with pytest.raises(ParameterError, match="add montage") as caught:
        drawing.plan_layout((3, 1, 16, 16), columns=2)
    assert caught.value.param == "columns"
    with pytest.raises(ParameterError, match="do not fit") as caught:
        drawing.plan_layout((400, 1, 16, 16), montage=True, size=64)
    assert caught.value.param == "size"


@settings(max_examples=30, deadline=None)
@given(depth=st.integers(1, 40), height=st.integers(1, 300), width=st.integers(1, 300), size=st.integers(16, 200))
def test_the_fitted_picture_is_within_size_and_minimal(depth, height, width, size):
    shape = (1, depth, height, width)
    layout = drawing.plan_layout(shape, size=size)
    assert max(layout.shape) <= size
    if layout.step > 1:  # one step less would not fit
        finer = drawing.plan_layout(shape, bin=layout.step - 1)
        assert max(finer.shape) > size
    magnified = drawing.plan_layout(shape, size=size, magnify=True)
    assert max(magnified.shape) <= size and magnified.step == layout.step
    assert magnified.zoom == 1 or layout.step == 1
    panels = len(magnified.panels)  # one row of panels: a value of every column m times, and the gaps
    wider = (magnified.shape[1] - drawing.GAP * (panels - 1)) // magnified.zoom * (magnified.zoom + 1)
    taller = magnified.shape[0] // magnified.zoom * (magnified.zoom + 1)
    assert layout.step > 1 or max(taller, wider + drawing.GAP * (panels - 1)) > size  # the largest m that fits


def test_the_encoders_load_before_a_first_picture():
    """load_encoders (a service's warm-up) loads Pillow and imagecodecs' libpng, which a first picture would wait
    for: in a fresh process, none of them before, both after."""
    probe = ("import sys\nfrom noa_core.pictures import drawing\n"
             "before = {m for m in ('PIL.Image', 'imagecodecs._png') if m in sys.modules}\n"
             "drawing.load_encoders()\n"
             "print(sorted(before), sorted(m for m in ('PIL.Image', 'imagecodecs._png') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "['PIL.Image',", "'imagecodecs._png']"]
