"""noa rescale --like relion and --new-box: against relion_image_handler --rescale_angpix [--new_box] (RELION
3.1.3) where it is installed, and always against RELION's code transcribed below in NumPy, literally (its
loops), from src/apps/image_handler.cpp, resizeMap (src/fftw.cpp) and windowFourierTransform (src/fftw.h)."""

from __future__ import annotations

import warnings

import mrcfile
import numpy as np
import pytest
import scipy.signal

from helpers import assert_user_error, load, mrc_data, noa, relion, write_mrc
from noa_core import operations
from noa_core.errors import ParameterError, ShapeError
from noa_core.fourier import resampling

# -- RELION 3.1.3, transcribed ------------------------------------------------------------------------


def relion_round(x: float) -> int:
    """RELION's ROUND (macros.h): half away from zero."""
    return int(x + 0.5) if x > 0 else int(x - 0.5)


def window_fourier_transform(spectrum: np.ndarray, newdim: int) -> np.ndarray:
    """windowFourierTransform(in, out, newdim): ``spectrum`` is the half transform (width last) of a square
    or cube, as FourierTransformer gives it."""
    xsize = spectrum.shape[-1]
    newhdim = newdim // 2 + 1
    out = np.zeros((newdim,) * (spectrum.ndim - 1) + (newhdim,), complex)

    def logical(index, shape):  # FOR_ALL_ELEMENTS_IN_FFTW_TRANSFORM(V): kp = k < XSIZE(V) ? k : k - ZSIZE(V)
        return [k if k < shape[-1] else k - n for k, n in zip(index[:-1], shape[:-1])] + [index[-1]]

    def element(shape, kps):  # FFTW_ELEM: negative logical indices wrap
        return tuple(k + n if k < 0 else k for k, n in zip(kps[:-1], shape[:-1])) + (kps[-1],)

    if newhdim > xsize:
        max_r2 = (xsize - 1) * (xsize - 1)
        for index in np.ndindex(spectrum.shape):
            kps = logical(index, spectrum.shape)
            if sum(k * k for k in kps) <= max_r2:
                out[element(out.shape, kps)] = spectrum[index]
    else:
        for index in np.ndindex(out.shape):
            kps = logical(index, out.shape)
            out[index] = spectrum[element(spectrum.shape, kps)]
    return out


def resize_map(image: np.ndarray, newsize: int) -> np.ndarray:
    """resizeMap(img, newsize): RELION's forward transform divides by the number of voxels, its inverse
    does not."""
    axes = tuple(range(image.ndim))
    spectrum = np.fft.rfftn(image, axes=axes) / image.size
    if newsize == image.shape[0]:
        return image
    windowed = window_fourier_transform(spectrum, newsize)
    return np.fft.irfftn(windowed, s=(newsize,) * image.ndim, axes=axes) * newsize ** image.ndim


def xmipp_window(image: np.ndarray, shape) -> np.ndarray:
    """setXmippOrigin(); window(FIRST_XMIPP_INDEX(n), ..., LAST_XMIPP_INDEX(n)): logical index 0 is the
    centre size // 2; new elements are 0."""
    out = np.zeros(shape)
    sources = [np.arange(m) - m // 2 + n // 2 for n, m in zip(image.shape, shape)]
    inside = [(s >= 0) & (s < n) for s, n in zip(sources, image.shape)]
    out[np.ix_(*inside)] = image[np.ix_(*[s[k] for s, k in zip(sources, inside)])]
    return out


def image_handler(image: np.ndarray, angpix: float, rescale_angpix: float, new_box: int | None = None):
    """perImageOperations' re-scale and re-window of one image or volume: (output, real_angpix)."""
    angpix, requested = float(np.float32(angpix)), float(np.float32(rescale_angpix))  # textToFloat: "%f"
    out = image.astype(np.float64)
    oldysize, oldxsize = out.shape[-2:]
    oldsize = oldxsize
    if oldxsize != oldysize and out.ndim == 2:
        oldsize = max(oldxsize, oldysize)
        out = xmipp_window(out, (oldsize, oldsize))
    newsize = relion_round(oldsize * (angpix / requested))
    newsize -= newsize % 2
    real_angpix = oldsize * angpix / newsize
    out = resize_map(out, newsize)
    if oldxsize != oldysize and out.ndim == 2:
        newxsize = relion_round(oldxsize * (angpix / real_angpix))
        newysize = relion_round(oldysize * (angpix / real_angpix))
        newxsize -= newxsize % 2
        newysize -= newysize % 2
        out = xmipp_window(out, (newysize, newxsize))
    if new_box is not None and out.shape[-1] != new_box:
        out = xmipp_window(out, (new_box,) * out.ndim)
    return out, real_angpix


def expected(data: np.ndarray, volume: bool, angpix: float, rescale_angpix: float, new_box: int | None = None):
    """The transcription over a stack (image by image) or a volume: (output, real_angpix)."""
    if volume:
        return image_handler(data, angpix, rescale_angpix, new_box)
    images = [image_handler(image, angpix, rescale_angpix, new_box) for image in data]
    return np.stack([i for i, _ in images]), images[0][1]


def close(got: np.ndarray, want: np.ndarray, scale: np.ndarray, tolerance: float = 1e-5) -> float:
    """max |got - want| relative to the input's max |value|, asserted below ``tolerance``."""
    assert got.shape == want.shape, (got.shape, want.shape)
    error = float(np.abs(got.astype(np.float64) - want).max() / np.abs(scale).max())
    assert error < tolerance, error
    return error


# (kind, shape, input pixel size, --rescale_angpix, --new_box): shrinking and enlarging, odd and even
# boxes, non-square images, volumes, a float32 rounding tie (15 x 1.5 / 0.6 = 37.5 -> 36) and RELION's
# window that is skipped when the width already is --new_box.
CASES = [
    ("stack", (3, 32, 32), 1.0, 2.0, None),
    ("stack", (3, 31, 31), 1.0, 1.4, None),
    ("stack", (2, 32, 32), 1.0, 0.7, None),
    ("stack", (2, 33, 33), 1.0, 0.75, 40),
    ("stack", (3, 20, 26), 1.5, 2.0, 24),
    ("stack", (2, 26, 20), 1.5, 1.0, 30),
    ("stack", (2, 20, 26), 1.5, 1.3928, 28),
    ("volume", (16, 16, 16), 1.0, 1.7, None),
    ("volume", (15, 15, 15), 1.5, 0.6, 40),
    ("volume", (16, 16, 16), 1.0, 0.8, 16),
]
IDS = [f"{k}{'x'.join(map(str, s))}-{a:g}to{r:g}" + (f"-box{b}" if b else "") for k, s, a, r, b in CASES]


def write_input(path, kind, shape, angpix, seed=0) -> np.ndarray:
    data = np.random.default_rng(seed).normal(size=shape).astype(np.float32)
    return write_mrc(path, data, stack=kind == "stack", voxel_size=angpix)


def run_relion(tmp_path, kind, angpix, rescale_angpix, new_box) -> tuple[np.ndarray, np.recarray]:
    name = "in.mrcs" if kind == "stack" else "in.mrc"
    out = tmp_path / ("relion.mrcs" if kind == "stack" else "relion.mrc")
    relion("relion_image_handler", "--i", tmp_path / name, "--o", out, "--angpix", angpix,
           "--rescale_angpix", rescale_angpix, *(("--new_box", new_box) if new_box else ()))
    data, _, voxel = mrc_data(out)
    return data, voxel


@pytest.mark.parametrize("kind, shape, angpix, rescale_angpix, new_box", CASES, ids=IDS)
def test_the_transcription_is_relions_program(tmp_path, kind, shape, angpix, rescale_angpix, new_box):
    """The oracle itself: the NumPy transcription gives what relion_image_handler writes."""
    data = write_input(tmp_path / ("in.mrcs" if kind == "stack" else "in.mrc"), kind, shape, angpix)
    got, voxel = run_relion(tmp_path, kind, angpix, rescale_angpix, new_box)
    want, real_angpix = expected(data, kind == "volume", angpix, rescale_angpix, new_box)
    close(got, want, data, 1e-6)
    assert (float(voxel.y), float(voxel.x)) == pytest.approx((real_angpix, real_angpix), rel=1e-6)


@pytest.mark.parametrize("kind, shape, angpix, rescale_angpix, new_box", CASES, ids=IDS)
def test_noa_like_relion_is_relion(tmp_path, kind, shape, angpix, rescale_angpix, new_box):
    """noa rescale --like relion (the CLI) against the transcription always, and against RELION's own
    output where RELION is installed; the pixel size that results is written on every rescaled axis."""
    suffix = ".mrcs" if kind == "stack" else ".mrc"
    data = write_input(tmp_path / f"in{suffix}", kind, shape, angpix)
    result = noa("rescale", tmp_path / f"in{suffix}", tmp_path / f"noa{suffix}", "--pixel-size", rescale_angpix,
                 "--like", "relion", *(("--new-box", new_box) if new_box else ()))
    assert result.returncode == 0, result.stderr
    got, header, voxel = mrc_data(tmp_path / f"noa{suffix}")
    want, real_angpix = expected(data, kind == "volume", angpix, rescale_angpix, new_box)
    close(got, want, data)
    assert (float(voxel.y), float(voxel.x)) == pytest.approx((real_angpix, real_angpix), rel=1e-6)
    assert float(voxel.z) == pytest.approx(real_angpix if kind == "volume" else angpix, rel=1e-6)
    assert "--like relion" in header.label[header.nlabl - 1].decode()
    relions, _ = run_relion(tmp_path, kind, angpix, rescale_angpix, new_box)
    close(got, relions, data)


@pytest.mark.parametrize("kind, shape, angpix, rescale_angpix, new_box", CASES, ids=IDS)
def test_library_like_relion_is_the_transcription(kind, shape, angpix, rescale_angpix, new_box):
    data = np.random.default_rng(1).normal(size=shape).astype(np.float32)
    x = data[None] if kind == "volume" else data[:, None]
    got = resampling.rescale(x, pixel_size=rescale_angpix, from_pixel_size=angpix, like="relion").numpy()
    want, real_angpix = expected(data, kind == "volume", angpix, rescale_angpix)  # no window here
    close(got[0] if kind == "volume" else got[:, 0], want, data)
    factor = resampling.pixel_factor(angpix, rescale_angpix, "relion")
    box = resampling.rescaling(shape[1:] if kind == "stack" else shape, factor, "relion")
    assert box.sizes == want.shape[-len(box.sizes):]
    assert box.spacing == pytest.approx((real_angpix / angpix,) * len(box.sizes))


def test_resize_like_relion_keeps_plus_nyquist_or_a_sphere():
    """Shrinking 8 -> 4, the row of frequency +2 is kept and -2 dropped (noa folds both); enlarging
    4 -> 8, the corners beyond radius 2 are zero (noa keeps the whole square), +2 lands on +2 only."""
    rng = np.random.default_rng(2)
    image = rng.normal(size=(1, 1, 8, 8))
    spectrum = np.fft.rfft2(resampling.fourier_resize(image, (4, 4), like="relion").numpy()[0, 0]) / 16 * 64
    full = np.fft.rfft2(image[0, 0])
    np.testing.assert_allclose(spectrum[2, 1:2], full[2, 1:2], atol=1e-9)  # +2 only
    folded = np.fft.rfft2(resampling.fourier_resize(image, (4, 4)).numpy()[0, 0]) / 16 * 64
    np.testing.assert_allclose(folded[2, 1:2], full[2, 1:2] + full[6, 1:2], atol=1e-9)
    small = rng.normal(size=(1, 1, 4, 4))
    grown = np.fft.rfft2(resampling.fourier_resize(small, (8, 8), like="relion").numpy()[0, 0]) / 4
    source = np.fft.rfft2(small[0, 0])
    np.testing.assert_allclose(grown[1, 1], source[1, 1], atol=1e-9)  # |(1, 1)| <= 2: kept
    assert np.abs(grown[[2, 2, 6], [2, 1, 1]]).max() < 1e-9  # |(2, 2)|, |(2, 1)|, |(-2, 1)| > 2: zero
    # +2 alone is kept, -2 left empty; the inverse transform (FFTW's and NumPy's alike) takes the
    # Hermitian part of that column: half on each
    np.testing.assert_allclose(grown[[2, 6], 0], source[2, 0] / 2, atol=1e-9)
    # noa: each axis on its own, Nyquist split, so the corners are kept (scipy.signal.resample)
    noas = resampling.fourier_resize(small, (8, 8)).numpy()[0, 0]
    np.testing.assert_allclose(noas, scipy.signal.resample(scipy.signal.resample(small[0, 0], 8, axis=0), 8, axis=1),
                               atol=1e-9)
    with pytest.raises(ShapeError, match="square"):
        resampling.fourier_resize(rng.normal(size=(1, 1, 8, 6)), (4, 4), like="relion")
    with pytest.raises(ParameterError, match="like"):
        resampling.fourier_resize(image, (4, 4), like="eman")


def test_rescaling_like_relion_refuses_non_cubic_volumes_and_reads_float32():
    with pytest.raises(ParameterError, match="cubic") as error:
        resampling.rescaling((12, 16, 16), 0.5, "relion")
    assert error.value.param == "like"
    assert resampling.rescaling((15, 15, 15), 1.5 / 0.6).sizes == (38, 38, 38)  # noa: 37.5 rounds up
    factor = resampling.pixel_factor(1.5, 0.6, "relion")
    assert resampling.rescaling((15, 15, 15), factor, "relion").sizes == (36, 36, 36)


# -- --new-box without --like relion; the origin keeps the content in place ------------------------------


def test_new_box_windows_noas_rescale_about_the_centre(tmp_path):
    data = write_mrc(tmp_path / "in.mrcs", np.random.default_rng(3).normal(size=(2, 30, 24)).astype(np.float32),
                     stack=True, voxel_size=1.0)
    result = noa("rescale", tmp_path / "in.mrcs", tmp_path / "out.mrcs", "--factor", "0.5", "--new-box", "20")
    assert result.returncode == 0, result.stderr
    got = load(tmp_path / "out.mrcs")
    resampled = scipy.signal.resample(scipy.signal.resample(data.astype(np.float64), 14, axis=1), 12, axis=2)
    want = np.zeros((2, 20, 20))  # centre 14 // 2 = 7 onto 20 // 2 = 10 (rows), 12 // 2 = 6 onto 10 (columns)
    want[:, 3:17, 4:16] = resampled
    close(got, want, data)


def blob(shape, centre, sigma=2.5) -> np.ndarray:
    grids = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
    return np.exp(-sum((g - c) ** 2 for g, c in zip(grids, centre)) / (2 * sigma ** 2)).astype(np.float32)


def centre_of(values: np.ndarray) -> np.ndarray:
    values = np.clip(values, 0, None) * (values > 0.05 * values.max())
    grids = np.meshgrid(*[np.arange(n) for n in values.shape], indexing="ij")
    return np.array([(g * values).sum() / values.sum() for g in grids])


@pytest.mark.parametrize("args", [("--factor", "0.8", "--new-box", "30"),
                                  ("--pixel-size", "2.2", "--like", "relion"),
                                  ("--pixel-size", "1.2", "--like", "relion", "--new-box", "26")])
def test_the_origin_keeps_the_content_in_place(tmp_path, args):
    """A blob at a known place (Å, with IMOD's coordinate = i x pixel - origin) is found at the same place
    in the output, whatever the rescale, the RELION square padding and the window did."""
    position = (10.2, 14.3)
    with mrcfile.new(tmp_path / "in.mrcs", blob((20, 28), position)[None], overwrite=True) as f:
        f.set_image_stack()
        f.voxel_size = 1.5
        f.header.origin = (-3.0, 4.0, 0.0)
    result = noa("rescale", tmp_path / "in.mrcs", tmp_path / "out.mrcs", *args)
    assert result.returncode == 0, result.stderr
    out, header, voxel = mrc_data(tmp_path / "out.mrcs")
    pixel, origin = (float(voxel.y), float(voxel.x)), (float(header.origin.y), float(header.origin.x))
    where = centre_of(out.reshape(out.shape[-2:])) * pixel - origin
    np.testing.assert_allclose(where, np.array(position) * 1.5 - (4.0, -3.0), atol=0.05)


# -- refusals and HTTP -------------------------------------------------------------------------------


def test_refusals_name_the_option(tmp_path):
    write_mrc(tmp_path / "map.mrc", np.ones((12, 16, 16), np.float32), voxel_size=1.0)
    assert_user_error(noa("rescale", tmp_path / "map.mrc", tmp_path / "x.mrc", "--factor", "0.5", "--like", "relion"),
                      "like", "cubic", "12 x 16 x 16")
    assert_user_error(noa("rescale", tmp_path / "map.mrc", tmp_path / "x.mrc", "--new-box", "8"),
                      "--factor", "noa resize")
    assert not (tmp_path / "x.mrc").exists()
    rescale = operations.get("rescale")
    for options, name in (({"like": "relion"}, "like"), ({"like": "eman"}, "like"), ({"new_box": 0}, "new_box")):
        with pytest.raises(ParameterError) as error:
            rescale.task(factor=0.5, **options).plan(tmp_path / "map.mrc")
        assert error.value.param == name


def test_http_upload_like_relion_with_a_new_box(tmp_path):
    warnings.filterwarnings("ignore", message=".*httpx.*")
    from fastapi.testclient import TestClient

    from noa_server.app import create_app
    from noa_server.settings import Settings

    root = tmp_path / "root"
    root.mkdir()
    data = write_input(root / "in.mrcs", "stack", (2, 20, 26), 1.5)
    with TestClient(create_app(Settings(warmup=False, data_root=root))) as client:
        response = client.post("/v1/upload/rescale", data={"pixel_size": "2", "like": "relion", "new_box": "24"},
                               files={"file": ("in.mrcs", (root / "in.mrcs").read_bytes())})
        assert response.status_code == 200, response.text
        (tmp_path / "up.mrcs").write_bytes(response.content)
        want, _ = expected(data, False, 1.5, 2.0, 24)
        close(load(tmp_path / "up.mrcs"), want, data)
        refused = client.post("/v1/upload/rescale", data={"factor": "0.5", "like": "eman"},
                              files={"file": ("in.mrcs", (root / "in.mrcs").read_bytes())})
        assert 400 <= refused.status_code < 500 and "like" in refused.text


def test_like_relion_at_the_same_size_returns_the_input():
    """RELION's windowFourierTransform returns its input unchanged at the same size: the corners beyond the
    sphere of radius N//2 are not blanked (they were, before)."""
    for shape in ((2, 1, 32, 32), (1, 20, 20, 20), (1, 1, 30, 30)):
        x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
        np.testing.assert_allclose(resampling.rescale(x, 1.0, like="relion").numpy(), x, atol=1e-5)
