"""The viewer's endpoints (GET /v1/view/...): pictures against the same picture computed here with NumPy
(block means, RELION's contrast formula, projections, tiles, spectra against numpy.fft), decoded with
Pillow; histograms, values and listings against NumPy, mrcfile and tifffile; caching, the sandbox, the
API key and the memory a tile takes.

In process (an app without its start-up warm-up: no kernel is compiled for these routes) except the key
test, which reads a live uvicorn's access log.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import httpx
import mdocfile
import mrcfile
import numpy as np
import pandas as pd
import pytest
import starfile
import tifffile
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from helpers import REPO, assert_problem, noa, start_server, stop_server, write_mrc

warnings.filterwarnings("ignore", message=".*httpx.*")
from fastapi.testclient import TestClient  # noqa: E402

from noa_core import io as noa_io  # noqa: E402
from noa_core.pictures import viewer  # noqa: E402
from noa_core.tomography import tiltseries  # noqa: E402
from noa_server.app import create_app  # noqa: E402
from noa_server.settings import Settings  # noqa: E402

TILE = 256
KEY = "viewer-key-8d1c0b"


# -- the oracle: the picture as the formulas say, in NumPy ---------------------------------------------

def block_mean(values: np.ndarray, k: int) -> np.ndarray:
    """k x k block means, blocks cut by the edge averaged over the pixels they have (float64 -> float32)."""
    rows, cols = values.shape
    padded = np.full((-(-rows // k) * k, -(-cols // k) * k), np.nan)
    padded[:rows, :cols] = values
    blocks = padded.reshape(padded.shape[0] // k, k, padded.shape[1] // k, k)
    return np.nanmean(blocks, axis=(1, 3)).astype(np.float32)


def limits(values: np.ndarray, contrast: str) -> tuple[float, float]:
    kind, _, rest = contrast.partition(":")
    flat = values.astype(np.float64).ravel()
    if kind == "sigma":  # RELION's --sigma_contrast: mean ± K sd (sample sd)
        k = float(rest)
        return flat.mean() - k * flat.std(ddof=1), flat.mean() + k * flat.std(ddof=1)
    if kind == "percentiles":
        lo, hi = (float(v) for v in rest.split(","))
        return tuple(np.percentile(flat, [lo, hi]))
    if kind == "minmax":
        return flat.min(), flat.max()
    return tuple(float(v) for v in rest.split(","))


def gray(values: np.ndarray, lo: float, hi: float, invert: bool = False) -> np.ndarray:
    """RELION's PNG levels (image_handler.cpp): floor((v - lo) / ((hi - lo) / 255)) of the clipped value."""
    levels = np.floor((np.clip(values.astype(np.float64), lo, hi) - lo) / ((hi - lo) / 255)).astype(np.uint8)
    return 255 - levels if invert else levels


def picture(values: np.ndarray, contrast: str = "sigma:3", invert: bool = False) -> np.ndarray:
    return gray(values, *limits(values, contrast), invert=invert)


def decoded(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/png"
    return np.asarray(Image.open(io.BytesIO(response.content)))


def integers(shape, seed: int = 0) -> np.ndarray:
    """float32 whole numbers: block sums are exact, so the oracle and noa agree to the last bit."""
    return np.random.default_rng(seed).integers(-1000, 1000, size=shape).astype(np.float32)


# -- fixtures ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("viewer-root")


@pytest.fixture(scope="module")
def client(root, tmp_path_factory) -> TestClient:
    app = create_app(Settings(warmup=False, data_root=root, tmp_dir=tmp_path_factory.mktemp("viewer-tmp"), workers=1))
    return TestClient(app, raise_server_exceptions=False)


def image_of(client: TestClient, **params) -> np.ndarray:
    return decoded(client.get("/v1/view/image", params=params))


# -- pictures --------------------------------------------------------------------------------------------

@settings(max_examples=12, deadline=None)
@given(rows=st.integers(16, 64), cols=st.integers(16, 64), size=st.integers(16, 64),
       contrast=st.sampled_from(["sigma:3", "sigma:1.5", "percentiles:2,98", "minmax", "range:-300,450"]),
       invert=st.booleans(), section=st.integers(0, 2))
def test_a_section_is_the_numpy_picture(client, root, rows, cols, size, contrast, invert, section):
    data = integers((3, rows, cols), seed=rows * 100 + cols)
    name = f"stack_{rows}_{cols}.mrcs"
    write_mrc(root / name, data, stack=True)
    got = image_of(client, file=name, section=section, size=size, contrast=contrast, invert=invert)
    k = max(1, -(-max(rows, cols) // size))
    expected = picture(block_mean(data[section], k), contrast, invert)
    assert got.shape == expected.shape and max(got.shape) <= size
    np.testing.assert_array_equal(got, expected)


def test_volume_slices_and_projections_on_each_axis(client, root):
    data = integers((12, 20, 28), seed=3)
    write_mrc(root / "volume.mrc", data)
    cases = [({"axis": "z"}, data[6]), ({"axis": "y", "index": 5}, data[:, 5, :]), ({"axis": "x", "index": 27},
             data[:, :, 27]), ({"axis": "z", "projection": True}, data.astype(np.float64).mean(axis=0)),
             ({"axis": "x", "projection": True}, data.astype(np.float64).mean(axis=2))]
    for params, plane in cases:
        got = image_of(client, file="volume.mrc", contrast="minmax", **params)
        np.testing.assert_array_equal(got, picture(plane.astype(np.float32), "minmax"), err_msg=str(params))


def test_colour_maps_and_jpeg(client, root):
    data = integers((24, 32), seed=5)
    write_mrc(root / "colour.mrc", data)
    fire = image_of(client, file="colour.mrc", cmap="fire", contrast="minmax")
    levels = picture(data, "minmax")
    # fire: black -> red over the first third, then green, then blue (matplotlib's "hot" knots)
    expected_red = np.rint(np.interp(levels / 255, [0, 1 / 3, 1], [0, 255, 255])).astype(np.uint8)
    assert fire.shape == (24, 32, 3)
    np.testing.assert_array_equal(fire[..., 0], expected_red)
    jpeg = client.get("/v1/view/image", params={"file": "colour.mrc", "format": "jpeg", "quality": 95,
                                                "contrast": "minmax"})
    assert jpeg.headers["content-type"] == "image/jpeg"
    decoded_jpeg = np.asarray(Image.open(io.BytesIO(jpeg.content)).convert("L"), dtype=np.int16)
    assert decoded_jpeg.shape == levels.shape and np.abs(decoded_jpeg - levels).mean() < 6


def test_the_spectrum_is_numpy_fft(client, root):
    data = np.random.default_rng(7).normal(size=(32, 48)).astype(np.float32)
    write_mrc(root / "noise.mrc", data)
    got = image_of(client, file="noise.mrc", spectrum=True, contrast="minmax", size=48)
    power = np.fft.fftshift(np.abs(np.fft.fft2(data.astype(np.float64))) ** 2 / data.size)
    expected = picture(np.log(np.maximum(power, np.finfo(np.float32).tiny)).astype(np.float32), "minmax")
    assert got.shape == expected.shape
    # scipy's and NumPy's transforms round differently: a level may move across a step of the floor
    assert np.abs(got.astype(int) - expected).max() <= 1 and (got == expected).mean() > 0.97


def test_tiles_are_the_block_means_of_their_regions(client, root):
    data = integers((600, 700), seed=11)
    write_mrc(root / "large.mrc", data)
    for level, x, y in [(0, 0, 0), (0, 2, 1), (1, 1, 1), (1, 0, 0), (2, 0, 0)]:
        k = 1 << level
        region = data[y * TILE * k:(y + 1) * TILE * k, x * TILE * k:(x + 1) * TILE * k]
        got = decoded(client.get("/v1/view/tile", params={"file": "large.mrc", "level": level, "x": x, "y": y,
                                                          "contrast": "range:-800,900"}))
        np.testing.assert_array_equal(got, gray(block_mean(region, k), -800, 900), err_msg=f"{level, x, y}")
    # the tiles of a level put together are the plane at that level
    whole = np.block([[decoded(client.get("/v1/view/tile", params={"file": "large.mrc", "level": 1, "x": x, "y": y,
                                                                  "contrast": "range:-800,900"})) for x in (0, 1)]
                      for y in (0, 1)])
    np.testing.assert_array_equal(whole, gray(block_mean(data, 2), -800, 900))
    # other rules: the limits of the plane's overview (here every pixel: 700 <= 1024), the same for every tile
    lo, hi = limits(data, "sigma:3")
    got = decoded(client.get("/v1/view/tile", params={"file": "large.mrc", "level": 0, "x": 2, "y": 2}))
    np.testing.assert_array_equal(got, gray(data[512:, 512:], lo, hi))
    histogram = client.get("/v1/view/histogram", params={"file": "large.mrc"}).json()
    assert histogram["plane"] == [600, 700] and histogram["levels"] == 3 and histogram["tile"] == TILE
    np.testing.assert_allclose(histogram["limits"]["sigma:3"], [lo, hi], rtol=1e-12)


BIG = 8192  # a plane of 256 MiB of float32


def test_a_tile_reads_only_its_region(tmp_path):
    """A server whose voxel limit is below the plane's refuses the whole picture, yet serves its tiles, and
    its peak memory grows by far less than the plane while doing so."""
    root = tmp_path / "root"
    root.mkdir()
    with mrcfile.new_mmap(root / "big.mrc", (BIG, BIG), mrc_mode=2) as f:  # sparse: only the tiles' rows are written
        f.data[1024:1536, 2048:2560] = integers((512, 512), seed=13)
    write_mrc(root / "small.mrc", integers((32, 32)))
    script = f"""
import io, json, resource, warnings
warnings.filterwarnings("ignore")
from pathlib import Path
import numpy as np
from PIL import Image
from fastapi.testclient import TestClient
from noa_server.app import create_app
from noa_server.settings import Settings
client = TestClient(create_app(Settings(warmup=False, data_root=Path({str(root)!r}), tmp_dir=Path({str(tmp_path)!r}),
                                        max_voxels={BIG * BIG - 1}, workers=1)))
assert client.get("/v1/view/tile", params={{"file": "small.mrc", "contrast": "range:0,1"}}).status_code == 200
whole = client.get("/v1/view/image", params={{"file": "big.mrc", "size": 256}})
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tiles = []
for level, x, y in [(0, 8, 4), (0, 9, 5), (1, 4, 2)]:
    r = client.get("/v1/view/tile", params={{"file": "big.mrc", "level": level, "x": x, "y": y,
                                              "contrast": "range:-800,900"}})
    tiles.append([r.status_code, np.asarray(Image.open(io.BytesIO(r.content))).tolist()])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"whole": [whole.status_code, whole.json()], "kib": [before, after], "tiles": tiles}}))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    status, problem = out["whole"]
    assert status == 422 and problem["type"] == "urn:noa:problem:too-many-voxels", problem
    with mrcfile.mmap(root / "big.mrc", permissive=True) as f:
        expected = [gray(np.array(f.data[1024:1280, 2048:2304]), -800, 900),
                    gray(np.array(f.data[1280:1536, 2304:2560]), -800, 900),
                    gray(block_mean(np.array(f.data[1024:1536, 2048:2560]), 2), -800, 900)]
    for (code, pixels), want in zip(out["tiles"], expected, strict=True):
        assert code == 200
        np.testing.assert_array_equal(np.array(pixels, dtype=np.uint8), want)
    before, after = out["kib"]
    assert after - before < 48 * 1024, f"peak memory grew by {(after - before) // 1024} MiB for three tiles"


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
def test_a_projection_holds_bands_not_the_plane_in_float64(tmp_path):
    """The mean of an 8192 x 8192 int8 volume's two sections drawn 256 pixels a side, and its histogram: the
    picture, the statistics and a value are NumPy's, and peak memory grows by a few bands (16 MiB) where the
    projected plane in float64 would be 512 MiB."""
    root = tmp_path / "root"
    root.mkdir()
    rng = np.random.default_rng(47)
    with mrcfile.new_mmap(root / "im.mrc", (2, BIG, BIG), mrc_mode=0) as f:
        for top in range(0, BIG, 1024):
            f.data[:, top:top + 1024] = rng.integers(-128, 128, (2, 1024, BIG), dtype=np.int8)
    write_mrc(root / "small.mrc", integers((32, 32)))
    script = f"""
import io, json, resource, warnings
warnings.filterwarnings("ignore")
from pathlib import Path
import numpy as np
from PIL import Image
from fastapi.testclient import TestClient
from noa_server.app import create_app
from noa_server.settings import Settings
client = TestClient(create_app(Settings(warmup=False, data_root=Path({str(root)!r}), tmp_dir=Path({str(tmp_path)!r}),
                                        workers=1)))
assert client.get("/v1/view/image", params={{"file": "small.mrc", "projection": True}}).status_code == 200
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
image = client.get("/v1/view/image", params={{"file": "im.mrc", "size": 256, "projection": True}})
histogram = client.get("/v1/view/histogram", params={{"file": "im.mrc", "projection": True}})
value = client.get("/v1/view/value", params={{"file": "im.mrc", "projection": True, "x": 4100, "y": 8191}})
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
assert image.status_code == histogram.status_code == value.status_code == 200, (image.text, histogram.text)
print(json.dumps({{"kib": [before, after], "image": np.asarray(Image.open(io.BytesIO(image.content))).tolist(),
                  "statistics": histogram.json()["statistics"], "value": value.json()["value"]}}))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    with mrcfile.mmap(root / "im.mrc", permissive=True) as f:  # the oracle: integer sums, 1024 rows at a time
        picture_means = np.concatenate([np.asarray(f.data[:, top:top + 1024], np.int64).sum(axis=0)
                                        .reshape(32, 32, 256, 32).sum(axis=(1, 3)) / (2 * 32 * 32)
                                        for top in range(0, BIG, 1024)]).astype(np.float32)
        overview = np.concatenate([np.asarray(f.data[:, top:top + 1024], np.int64).sum(axis=0)
                                   .reshape(128, 8, 1024, 8).sum(axis=(1, 3)) / (2 * 8 * 8)
                                   for top in range(0, BIG, 1024)]).astype(np.float32)
        expected_value = np.asarray(f.data[:, 8191, 4100], np.float64).mean()
    np.testing.assert_array_equal(np.array(out["image"], dtype=np.uint8), picture(picture_means))
    stats = out["statistics"]
    assert (stats["min"], stats["max"]) == (overview.min(), overview.max())
    np.testing.assert_allclose([stats["mean"], stats["sd"]], [overview.mean(dtype=np.float64),
                                                              overview.std(dtype=np.float64)], rtol=1e-6)
    assert out["value"] == expected_value
    before, after = out["kib"]
    assert after - before < 128 * 1024, f"peak memory grew by {(after - before) // 1024} MiB"


def test_the_working_memory_is_checked_before_drawing(client, root, monkeypatch):
    from noa_core import limits

    write_mrc(root / "checked.mrc", integers((64, 64), seed=49))
    monkeypatch.setattr(limits, "available_memory", lambda: 1 << 20)
    for endpoint in ("image", "tile", "histogram"):
        body = assert_problem(client.get(f"/v1/view/{endpoint}", params={"file": "checked.mrc"}), 507,
                              "insufficient-memory")
        assert body["detail"].startswith("checked.mrc: ") and "1 MiB available" in body["detail"], body
    monkeypatch.undo()
    assert client.get("/v1/view/image", params={"file": "checked.mrc"}).status_code == 200


# -- histogram, value, header, listing -----------------------------------------------------------------------

def test_the_histogram_its_statistics_and_the_limits_of_each_rule(client, root):
    data = integers((40, 50), seed=17)
    write_mrc(root / "hist.mrc", data)
    got = client.get("/v1/view/histogram", params={"file": "hist.mrc", "bins": 64,
                                                   "contrast": "percentiles:5,95"}).json()
    counts, edges = np.histogram(data.astype(np.float64), bins=64)
    assert got["counts"] == counts.tolist()
    np.testing.assert_allclose(got["edges"], edges, rtol=1e-12)
    for rule in ("sigma:3", "percentiles:1,99", "minmax", "percentiles:5,95"):
        np.testing.assert_allclose(got["limits"][rule], limits(data, rule), rtol=1e-12, err_msg=rule)
    stats = got["statistics"]
    assert stats["min"] == data.min() and stats["max"] == data.max()
    np.testing.assert_allclose([stats["mean"], stats["sd"]], [data.mean(dtype=np.float64), data.std(dtype=np.float64)])


def test_the_value_under_the_cursor(client, root):
    data = integers((6, 10, 12), seed=19)
    write_mrc(root / "values.mrc", data)
    got = client.get("/v1/view/value", params={"file": "values.mrc", "x": 11, "y": 9}).json()
    assert got["value"] == data[3, 9, 11]
    got = client.get("/v1/view/value", params={"file": "values.mrc", "axis": "y", "index": 2, "x": 4, "y": 5}).json()
    assert got == {"file": "values.mrc", "x": 4, "y": 5, "value": float(data[5, 2, 4])}
    got = client.get("/v1/view/value", params={"file": "values.mrc", "projection": True, "x": 1, "y": 2}).json()
    assert got["value"] == pytest.approx(data[:, 2, 1].astype(np.float64).mean(), rel=1e-6)
    body = assert_problem(client.get("/v1/view/value", params={"file": "values.mrc", "x": 12, "y": 0}), 400)
    assert body["detail"].startswith("x: ")


def test_the_header_is_what_info_says(client, root):
    data = integers((4, 8, 10))
    with mrcfile.new(root / "labelled.mrc", data, overwrite=True) as f:
        f.voxel_size = 2.5
        f.header.label[1] = b"<script>alert(1)</script>"
        f.header.nlabl = 2
    got = client.get("/v1/view/info", params={"file": "labelled.mrc"}).json()
    assert got["path"] == "labelled.mrc" and got["shape"] == [1, 4, 8, 10] and got["pixel_size"] == [2.5] * 3
    assert "<script>alert(1)</script>" in got["labels"]


def test_the_listing_says_what_the_headers_say(client, tmp_path, make_client):
    root = tmp_path / "listed"
    (root / "sub" / "deeper").mkdir(parents=True)
    write_mrc(root / "map.mrc", integers((5, 6, 7)), voxel_size=1.25)
    write_mrc(root / "sub" / "stack.mrcs", integers((3, 6, 7)), stack=True)
    with mrcfile.new(root / "flat.mrc", integers((6, 7))) as f:
        f.voxel_size = (2.0, 2.0, 0.0)  # x, y known; z (one section) not
    tifffile.imwrite(root / "image.tif", np.zeros((9, 11), np.uint16))
    (root / "notes.txt").write_text("not an image")
    (root / ".hidden.mrc").write_bytes((root / "map.mrc").read_bytes())
    outside = tmp_path / "outside.mrc"
    write_mrc(outside, integers((4, 4)))
    (root / "escape.mrc").symlink_to(outside)
    api = make_client(data_root=root)
    listing = api.get("/v1/view/list").json()
    assert listing["folders"] == [{"name": "sub", "path": "sub"}] and not listing["truncated"]
    files = {f["name"]: f for f in listing["files"]}
    assert sorted(files) == ["flat.mrc", "image.tif", "map.mrc", "notes.txt"]  # no hidden file, no link out of the root
    with mrcfile.open(root / "map.mrc") as f:
        assert files["map.mrc"].get("shape") == [1, *f.data.shape] and files["map.mrc"]["format"] == "mrc", files
        assert files["map.mrc"]["pixel_size"] == [float(f.voxel_size.z), float(f.voxel_size.y), float(f.voxel_size.x)]
    assert files["map.mrc"]["dtype"] == "float32" and files["map.mrc"]["bytes"] == (root / "map.mrc").stat().st_size
    assert files["image.tif"]["shape"] == [1, 1, *tifffile.imread(root / "image.tif").shape]
    # unknown stays unknown, as null where noa info says "unknown" (issue 40 item 11: it was [0.0, 0.0, 0.0])
    assert files["image.tif"]["pixel_size"] is None
    assert files["flat.mrc"]["pixel_size"] == [None, 2.0, 2.0]  # an image's z: unknown, not 0
    assert "notes.txt" in files["notes.txt"]["error"] and "shape" not in files["notes.txt"]
    assert str(root) not in json.dumps(listing)
    sub = api.get("/v1/view/list", params={"path": "sub"}).json()
    assert sub["path"] == "sub" and sub["folders"] == [{"name": "deeper", "path": "sub/deeper"}]
    assert [(f["path"], f["shape"]) for f in sub["files"]] == [("sub/stack.mrcs", [3, 1, 6, 7])]


# -- caching ---------------------------------------------------------------------------------------------------

def test_etag_from_the_file_and_the_query_and_304(client, root):
    path = root / "cached.mrc"
    write_mrc(path, integers((16, 16), seed=23))
    params = {"file": "cached.mrc", "contrast": "minmax"}
    first = client.get("/v1/view/image", params=params)
    tag = first.headers["etag"]
    assert tag.startswith('"') and first.headers["cache-control"] == "private, no-cache"
    again = client.get("/v1/view/image", params=params, headers={"If-None-Match": f'W/"other", {tag}'})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == tag
    assert client.get("/v1/view/image", params={**params, "invert": True}).headers["etag"] != tag
    assert client.get("/v1/view/tile", params=params).headers["etag"] != tag
    for endpoint in ("histogram", "info"):
        answer = client.get(f"/v1/view/{endpoint}", params={"file": "cached.mrc"})
        assert client.get(f"/v1/view/{endpoint}", params={"file": "cached.mrc"},
                          headers={"If-None-Match": answer.headers["etag"]}).status_code == 304
    # rewritten in place: another identity (size and modification time), so a fresh picture
    write_mrc(path, integers((16, 20), seed=29))
    os.utime(path, ns=(1, 1))
    fresh = client.get("/v1/view/image", params=params, headers={"If-None-Match": tag})
    assert fresh.status_code == 200 and fresh.headers["etag"] != tag and decoded(fresh).shape == (16, 20)


def _answers(client: TestClient, name: str, **params) -> dict[str, httpx.Response]:
    """The picture, histogram and value of ``name`` (the cursor at 3, 2)."""
    return {"image": client.get("/v1/view/image", params={"file": name, "contrast": "minmax", **params}),
            "histogram": client.get("/v1/view/histogram", params={"file": name, **params}),
            "value": client.get("/v1/view/value", params={"file": name, "x": 3, "y": 2, **params})}


def _revalidated(client: TestClient, before: dict[str, httpx.Response]) -> dict[str, httpx.Response]:
    """The same requests as ``before`` with its ETags in If-None-Match: each must be a 200 with a new ETag."""
    after = {}
    for endpoint, answer in before.items():
        again = client.get(answer.request.url, headers={"If-None-Match": answer.headers["etag"]})
        assert again.status_code == 200, (endpoint, again.status_code)
        assert again.headers["etag"] != answer.headers["etag"], endpoint
        after[endpoint] = again
    return after


def test_a_store_whose_chunks_zarr_rewrites_gets_new_etags_and_statistics(client, root):
    """A chunk rewritten inside level 0 changes no stat of the store's folder: the identity is that of its files."""
    data = integers((6, 40, 48), seed=41)
    noa_io.write(root / "store.ome.zarr", data)
    before = _answers(client, "store.ome.zarr")
    assert before["histogram"].json()["statistics"]["max"] == data[3].max()  # the central z slice
    assert before["value"].json()["value"] == data[3, 2, 3]
    for answer in before.values():  # cacheable while nothing changes: the same ETag gives a 304
        assert client.get(answer.request.url, headers={"If-None-Match": answer.headers["etag"]}).status_code == 304
    zarr.open_array(str(root / "store.ome.zarr" / "0"), mode="r+")[...] = 42
    after = _revalidated(client, before)
    assert after["histogram"].json()["statistics"] == {"min": 42.0, "max": 42.0, "mean": 42.0, "sd": 0.0}
    assert after["value"].json()["value"] == 42.0
    assert (decoded(after["image"]) == 127).all()  # a constant plane: minmax limits 41.5..42.5


def test_a_file_rewritten_in_place_with_its_time_put_back_gets_new_etags(client, root):
    """As cp -p or rsync -t --inplace leave it: same inode, size and modification time; only the change time moves."""
    path = root / "inplace.mrc"
    write_mrc(path, integers((24, 32), seed=43))
    before = _answers(client, "inplace.mrc")
    old = os.stat(path)
    new = integers((24, 32), seed=44)
    with mrcfile.mmap(path, mode="r+") as f:
        f.data[...] = new
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    while os.stat(path).st_ctime_ns == old.st_ctime_ns:  # the change time moves with the kernel's clock tick
        os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    now = os.stat(path)
    assert (now.st_ino, now.st_size, now.st_mtime_ns) == (old.st_ino, old.st_size, old.st_mtime_ns)
    after = _revalidated(client, before)
    np.testing.assert_array_equal(decoded(after["image"]), picture(new, "minmax"))
    stats = after["histogram"].json()["statistics"]
    assert (stats["min"], stats["max"]) == (new.min(), new.max())
    assert after["value"].json()["value"] == new[2, 3]


def test_a_store_of_more_entries_than_are_statted_is_never_cached(client, root, monkeypatch):
    noa_io.write(root / "many.ome.zarr", integers((16, 16), seed=45))
    monkeypatch.setattr(viewer, "MAX_STORE_ENTRIES", 2)
    first = client.get("/v1/view/image", params={"file": "many.ome.zarr"})
    again = client.get("/v1/view/image", params={"file": "many.ome.zarr"},
                       headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 200 and again.headers["etag"] != first.headers["etag"]
    np.testing.assert_array_equal(decoded(again), decoded(first))


# -- a tilt series' tilts: the files beside the stack ----------------------------------------------------------

REAL_MDOC = REPO / "tests" / "data" / "mdoc" / "tilt_series.mdoc"  # SerialEM's: 41 tilts, ExposureDose 0
TILTS = 41


def tilt_stack(folder: Path, name: str, sections: int = TILTS) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_mrc(folder / name, integers((sections, 8, 8)), stack=True)


def dosed_mdoc(path: Path) -> None:
    """The real mdoc with an ExposureDose of its own for each tilt (SerialEM wrote 0: no dose calibration)."""
    sections = re.split(r"(?=\[ZValue = )", REAL_MDOC.read_text())
    path.write_text(sections[0] + "".join(
        re.sub(r"(?m)^ExposureDose = 0$", f"ExposureDose = {2.5 + 0.125 * (z % 7)}", section)
        for z, section in enumerate(sections[1:])))


def tilts_of(client: TestClient, name: str, **exclusions) -> dict:
    answer = client.get("/v1/view/tilts", params={"file": name, **exclusions})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_tilt_series_sections_angle_and_dose_from_its_mdoc(client, root):
    folder = root / "tilts"
    tilt_stack(folder, "TS_01.st")
    dosed_mdoc(folder / "TS_01.st.mdoc")
    np.savetxt(folder / "TS_01.rawtlt", np.linspace(-60, 60, TILTS), fmt="%.2f")  # the mdoc's angles come first
    found = tilts_of(client, "tilts/TS_01.st")
    # the oracle: mdocfile's reading; the dose before each tilt, the ExposureDose of those taken before it (DateTime)
    table = mdocfile.read(folder / "TS_01.st.mdoc").sort_values("ZValue").reset_index(drop=True)
    taken = pd.to_datetime(table["DateTime"], format="%d-%b-%y %H:%M:%S").sort_values(kind="stable").index
    before = np.zeros(TILTS)
    before[taken] = np.concatenate(([0.0], np.cumsum(table["ExposureDose"].to_numpy()[taken])[:-1]))
    assert found["sections"] == TILTS and found["notice"] is None
    np.testing.assert_array_equal([t["angle"] for t in found["tilts"]], table["TiltAngle"])
    np.testing.assert_allclose([t["pre_exposure"] for t in found["tilts"]], before, rtol=1e-12)
    np.testing.assert_array_equal([t["dose"] for t in found["tilts"]], table["ExposureDose"])
    assert found["from"] == {"angle": "tilts/TS_01.st.mdoc", "pre_exposure": "tilts/TS_01.st.mdoc",
                             "dose": "tilts/TS_01.st.mdoc"}
    assert found["pre_exposure_rule"].startswith("ExposureDose summed in acquisition order (DateTime)")
    assert found["files"] == ["tilts/TS_01.rawtlt", "tilts/TS_01.st.mdoc"]
    # SerialEM's own mdoc (ExposureDose 0: no dose known) gives the angles alone
    (folder / "TS_01.st.mdoc").write_text(REAL_MDOC.read_text())
    undosed = tilts_of(client, "tilts/TS_01.st")["tilts"]
    assert [t["angle"] for t in undosed] == table["TiltAngle"].tolist()
    assert {(t["pre_exposure"], t["dose"]) for t in undosed} == {(None, None)}


def test_angles_from_a_rawtlt_and_the_pre_exposure_from_a_relion_star(client, root):
    folder = root / "tilts"
    tilt_stack(folder, "plain.mrcs", 5)
    np.savetxt(folder / "plain.rawtlt", [-6.5, -3.25, 0.0, 3.25, 6.5], fmt="%g")
    found = tilts_of(client, "tilts/plain.mrcs")
    np.testing.assert_array_equal([t["angle"] for t in found["tilts"]], np.loadtxt(folder / "plain.rawtlt"))
    assert {(t["pre_exposure"], t["dose"]) for t in found["tilts"]} == {(None, None)}
    assert found["from"] == {"angle": "tilts/plain.rawtlt"} and found["pre_exposure_rule"] is None
    starfile.write({"plain": pd.DataFrame({
        "rlnMicrographName": [f"{z + 1:06d}@plain.mrcs" for z in range(5)],
        "rlnTomoNominalStageTiltAngle": [-6.5, -3.25, 0.0, 3.25, 6.5],
        "rlnMicrographPreExposure": [12.0, 6.0, 0.0, 3.0, 9.0]})}, folder / "plain.star")
    found = tilts_of(client, "tilts/plain.mrcs")
    expected = starfile.read(folder / "plain.star")["rlnMicrographPreExposure"]
    np.testing.assert_array_equal([t["pre_exposure"] for t in found["tilts"]], expected)
    assert found["from"] == {"angle": "tilts/plain.rawtlt", "pre_exposure": "tilts/plain.star"}


def test_a_stack_without_files_beside_it_has_no_tilts(client, root):
    tilt_stack(root / "tilts", "alone.st", 3)
    assert tilts_of(client, "tilts/alone.st") == {
        "file": "tilts/alone.st", "sections": 3, "tilts": None, "from": {}, "pre_exposure_rule": None, "files": [],
        "notice": None}


def test_files_that_disagree_with_the_stack_or_cannot_be_read_give_no_tilts_and_say_why(client, root):
    folder = root / "tilts"
    tilt_stack(folder, "short.st", 4)
    np.savetxt(folder / "short.rawtlt", [-3.0, 0.0, 3.0])
    found = tilts_of(client, "tilts/short.st")
    assert found["tilts"] is None
    assert found["notice"].startswith("tilts/short.rawtlt: 3 angles, and the stack tilts/short.st has 4 sections")
    tilt_stack(folder, "bad.st", TILTS)
    (folder / "bad.st.mdoc").write_text(REAL_MDOC.read_text().replace("TiltAngle = 3.00113", "TiltAngle = 93"))
    found = tilts_of(client, "tilts/bad.st")
    assert found["tilts"] is None and found["files"] == ["tilts/bad.st.mdoc"]
    assert found["notice"].startswith("tilts/bad.st.mdoc: [ZValue = 1]: TiltAngle 93.0: not a stage tilt")


def test_a_side_file_linked_out_of_the_data_root_is_refused(client, root):
    tilt_stack(root / "tilts", "linked.st", 3)
    outside = root.parent / "outside.rawtlt"
    np.savetxt(outside, [-3.0, 0.0, 3.0])
    (root / "tilts" / "linked.rawtlt").symlink_to(outside)
    body = assert_problem(client.get("/v1/view/tilts", params={"file": "tilts/linked.st"}), 403, "path-refused")
    assert body["detail"].startswith("tilts/linked.rawtlt: ") and "outside the data root" in body["detail"], body


def test_the_tilts_etag_is_the_stack_and_its_files_and_a_volume_is_refused(client, root):
    folder = root / "tilts"
    tilt_stack(folder, "tagged.st", 3)
    np.savetxt(folder / "tagged.tlt", [-3.0, 0.0, 3.0])
    first = client.get("/v1/view/tilts", params={"file": "tilts/tagged.st"})
    tag = first.headers["etag"]
    again = client.get("/v1/view/tilts", params={"file": "tilts/tagged.st"}, headers={"If-None-Match": tag})
    assert again.status_code == 304 and again.headers["etag"] == tag
    np.savetxt(folder / "tagged.tlt", [-3.5, 0.0, 3.5])  # the side file rewritten: a new answer
    fresh = client.get("/v1/view/tilts", params={"file": "tilts/tagged.st"}, headers={"If-None-Match": tag})
    assert fresh.status_code == 200 and fresh.headers["etag"] != tag
    assert [t["angle"] for t in fresh.json()["tilts"]] == [-3.5, 0.0, 3.5]
    write_mrc(folder / "volume.mrc", integers((3, 8, 8)))
    body = assert_problem(client.get("/v1/view/tilts", params={"file": "tilts/volume.mrc"}), 400,
                          "invalid-parameter")
    assert body["detail"].startswith("file: tilts/volume.mrc: a volume of 3 slices"), body


def raw_tilt_series(folder: Path) -> np.ndarray:
    """SerialEM's raw TS_01.mrc (41 positive sections, 7 of them zeros: a shuttered tilt) with the real mdoc beside it
    as TS_01.mrc.mdoc, its ImageSize the stack's; returns the sections."""
    folder.mkdir(parents=True, exist_ok=True)
    data = integers((TILTS, 8, 8)) + 2000
    data[7] = 0
    (folder / "TS_01.mrc.mdoc").write_text(REAL_MDOC.read_text().replace("ImageSize = 924 958", "ImageSize = 8 8"))
    return write_mrc(folder / "TS_01.mrc", data, stack=True, voxel_size=5.4)


def test_tilts_say_which_sections_noa_tiltseries_would_leave_out_and_why(client, root, tmp_path):
    """Issue 45 item 5: the exclusions of noa tiltseries previewed on the raw stack, each section's reason the one its
    CLI reports for the same options on the same series."""
    data = raw_tilt_series(root / "raw")
    options = {"exclude": "1-2,41", "max_angle": 55, "exclude_dark": 0.3}
    rows = tilts_of(client, "raw/TS_01.mrc", **options)["tilts"]
    found = {z: row["excluded"] for z, row in enumerate(rows) if row["excluded"] is not None}
    done = noa("tiltseries", root / "raw" / "TS_01.mrc.mdoc", "--exclude", "1-2,41", "--max-angle", "55",
               "--exclude-dark", "0.3", "-o", tmp_path / "TS.st")
    assert done.returncode == 0, done.stderr
    reported = {int(z): why for z, why in re.findall(r"\[ZValue = (\d+)\] \(view \d+, [^)]*\) left out: (.*)",
                                                      done.stderr)}
    assert found == reported
    # and against tiltseries.excluded called on the mdoc, each tilt's mean by NumPy
    series = tiltseries.read(root / "raw" / "TS_01.mrc.mdoc")
    angles = np.array([t.angle for t in series.tilts])
    kept = [z for z in range(TILTS) if z not in (0, 1, 40) and abs(angles[z]) <= 55]
    means = {z: float(data[z].astype(np.float64).mean()) for z in kept}
    assert found == tiltseries.excluded(series, [0, 1, 40], 55, 0.3, means)
    assert [z for z in kept if means[z] < 0.3 * np.median(list(means.values()))] == [7]
    assert found[7].endswith("(dark)") and found[0] == "view 1 excluded" and len(found) == 7
    # no exclusion given: none left out, and the stack is not read for means
    assert {row["excluded"] for row in tilts_of(client, "raw/TS_01.mrc")["tilts"]} == {None}


def test_tilts_exclusions_from_a_rawtlt_and_their_etag(client, root):
    folder = root / "tilts"
    tilt_stack(folder, "ranged.st", 3)
    np.savetxt(folder / "ranged.rawtlt", [-3.0, 0.5, 3.0])
    plain = client.get("/v1/view/tilts", params={"file": "tilts/ranged.st"})
    limited = client.get("/v1/view/tilts", params={"file": "tilts/ranged.st", "max_angle": 2})
    assert [t["excluded"] for t in limited.json()["tilts"]] == ["-3° is beyond 2°", None, "3° is beyond 2°"]
    assert limited.headers["etag"] != plain.headers["etag"]
    again = client.get("/v1/view/tilts", params={"file": "tilts/ranged.st", "max_angle": 2},
                       headers={"If-None-Match": limited.headers["etag"]})
    assert again.status_code == 304
    views = client.get("/v1/view/tilts", params={"file": "tilts/ranged.st", "exclude": "2"},
                       headers={"If-None-Match": limited.headers["etag"]})
    assert views.status_code == 200 and views.headers["etag"] not in (plain.headers["etag"], limited.headers["etag"])
    assert [t["excluded"] for t in views.json()["tilts"]] == [None, "view 2 excluded", None]


@pytest.mark.parametrize("file, params, slug, starts", [
    ("raw/TS_01.mrc", {"exclude": "1-x"}, "invalid-parameter", "exclude: '1-x' in '1-x' is not a section number"),
    ("raw/TS_01.mrc", {"exclude": "40-42"}, "invalid-parameter", "exclude: section 42 (in '40-42') is outside 1..41"),
    ("raw/TS_01.mrc", {"exclude": ""}, "invalid-parameters", "query.exclude: "),
    ("raw/TS_01.mrc", {"max_angle": 91}, "invalid-parameters", "query.max_angle: "),
    ("raw/TS_01.mrc", {"exclude_dark": 1.5}, "invalid-parameters", "query.exclude_dark: "),
    ("tilts/bare.st", {"max_angle": 60}, "invalid-parameter", "max_angle: tilts/bare.st: the files beside it give no "
                                                              "tilt angles"),
])
def test_tilts_bad_exclusions_are_problems_naming_the_parameter(client, root, file, params, slug, starts):
    raw_tilt_series(root / "raw")
    tilt_stack(root / "tilts", "bare.st", 3)
    body = assert_problem(client.get("/v1/view/tilts", params={"file": file, **params}), 400, slug)
    assert body["detail"].startswith(starts), body


# -- refusals --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("params, status, slug, named", [
    ({"file": "../outside.mrc"}, 403, "path-refused", ".."),
    ({"file": "/etc/passwd"}, 403, "path-refused", "absolute"),
    ({"file": "sub%2f..%2fx.mrc"}, 403, "path-refused", "encoded"),
    ({"file": "link_out.mrc"}, 403, "path-refused", "outside the data root"),
    ({"file": "missing.mrc"}, 404, "file-not-found", "missing.mrc"),
    ({"file": "good.mrc", "size": 5}, 400, "invalid-parameters", "size"),
    ({"file": "good.mrc", "axis": "w"}, 400, "invalid-parameters", "axis"),
    ({"file": "good.mrc", "contrast": "range:5,1"}, 400, "invalid-parameter", "contrast"),
    ({"file": "good.mrc", "contrast": "sigma:-1"}, 400, "invalid-parameter", "contrast"),
    ({"file": "good.mrc", "contrast": "sigma"}, 400, "invalid-parameters", "contrast"),
    ({"file": "good.mrc", "cmap": "jet"}, 400, "invalid-parameters", "cmap"),
    ({"file": "good.mrc", "section": 4}, 400, "invalid-parameter", "section"),
    ({"file": "good.mrc", "axis": "y"}, 400, "invalid-parameter", "axis"),
    ({"file": "good.mrc", "quality": 0}, 400, "invalid-parameters", "quality"),
])
def test_bad_requests_are_problems_naming_what_is_wrong(client, root, params, status, slug, named):
    write_mrc(root / "good.mrc", integers((20, 20)))
    outside = root.parent / "outside.mrc"
    write_mrc(outside, integers((4, 4)))
    if not (root / "link_out.mrc").is_symlink():
        (root / "link_out.mrc").symlink_to(outside)
    body = assert_problem(client.get("/v1/view/image", params=params), status, slug)
    assert named in body["detail"], body


def test_tile_coordinates_past_the_plane_and_folders_outside(client, root):
    write_mrc(root / "tiles.mrc", integers((300, 600)))
    for params, named in [({"level": 3}, "level"), ({"level": 0, "x": 3}, "x"), ({"level": 1, "y": 1}, "y")]:
        body = assert_problem(client.get("/v1/view/tile", params={"file": "tiles.mrc", **params}), 400,
                              "invalid-parameter")
        assert body["detail"].startswith(f"{named}: "), body
    assert_problem(client.get("/v1/view/list", params={"path": "../"}), 403, "path-refused")
    for absolute in ("/", "//", "/sub"):  # refused as absolute, as every path is ("/" is not an empty path)
        assert "absolute paths are refused" in assert_problem(
            client.get("/v1/view/list", params={"path": absolute}), 403, "path-refused")["detail"]
    body = assert_problem(client.get("/v1/view/list", params={"path": "tiles.mrc"}), 404, "file-not-found")
    assert body["detail"] == "tiles.mrc: a file, not a folder"
    assert_problem(client.get("/v1/view/info", params={"file": "."}), 403, "path-refused")


def test_the_page_and_its_parts_forbid_inline_script_and_remote_loads(client):
    page = client.get("/view")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = dict(part.strip().split(" ", 1) for part in page.headers["content-security-policy"].split(";"))
    assert csp["default-src"] == "'none'" and csp["script-src"] == "'self'" and csp["connect-src"] == "'self'"
    assert "http" not in page.text.replace('http-equiv', '') and "<script>" not in page.text
    script = client.get("/view/view.js")
    assert script.headers["content-type"].startswith("text/javascript") and "innerHTML" not in script.text
    assert "http://" not in script.text and "https://" not in script.text
    assert client.get("/view/view.css").status_code == 200
    assert_problem(client.get("/view/secret.py"), 404)


def test_the_key_is_required_and_never_logged(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    data = integers((20, 30))
    write_mrc(root / "keyed.mrc", data)
    log = tmp_path / "server.log"
    proc, url = start_server(root, log, {"NOA_API_KEY": KEY}, args=("--processes", "1", "--log-level", "info"))
    try:
        with httpx.Client(base_url=url, timeout=60) as http:
            for endpoint in ("list", "image?file=keyed.mrc", "tile?file=keyed.mrc", "info?file=keyed.mrc"):
                assert_problem(http.get(f"/v1/view/{endpoint}"), 401, "unauthorized")
                assert_problem(http.get(f"/v1/view/{endpoint}", headers={"X-API-Key": "wrong"}), 401)
            assert http.get("/view").status_code == 200  # the page holds no data: no key needed
            got = decoded(http.get("/v1/view/image", params={"file": "keyed.mrc", "contrast": "minmax"},
                                   headers={"X-API-Key": KEY}))
            np.testing.assert_array_equal(got, picture(data, "minmax"))
    finally:
        stop_server(proc)
    text = log.read_text()
    assert "/v1/view/image?file=keyed.mrc" in text  # the access log is on
    assert KEY not in text
