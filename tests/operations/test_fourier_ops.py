"""noa rescale, filter, powerspectrum and transform: plans, results against NumPy/scipy/mrcfile, the CLI and HTTP."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import scipy.signal
from scipy import ndimage

from helpers import (
    assert_problem,
    assert_user_error,
    load,
    mrc_data,
    need_shared,
    noa,
    start_server,
    wait_job,
    write_mrc,
)
from noa_core import io, operations
from noa_core.compute.moments import RunningStatistics
from noa_core.fourier import resampling, spectral
from noa_core.geometry import transforms


def stack(path, shape=(5, 48, 40), voxel=1.25, seed=0) -> np.ndarray:
    data = np.random.default_rng(seed).normal(size=shape).astype(np.float32)
    return write_mrc(path, data, stack=True, voxel_size=voxel)


def filled_in_tiles(plan, out, block_bytes: int) -> list:
    """``plan`` written to ``out`` with tiles of at most ``block_bytes``; the tiles' keys."""
    with plan.create(out, overwrite=True) as writer:
        keys = plan.keys(writer, block_bytes)
        io.fill(writer, plan.sources, None, reads=plan.tile_reads(), keys=keys)
    return keys


# -- filter ---------------------------------------------------------------------------------------------


def test_filter_plan_writes_whole_images_in_tiles(tmp_path):
    data = stack(tmp_path / "in.mrcs", shape=(24, 256, 192))
    plan = operations.get("filter").task(lowpass=5.0, highpass=40.0, edge_width=3).plan(tmp_path / "in.mrcs")
    assert plan.shape == (24, 1, 256, 192) and plan.whole_axes == (1, 2, 3) and plan.dtype == np.float32
    assert plan.label == "noa filter --lowpass 5 --highpass 40 --edge-width 3"
    keys = filled_in_tiles(plan, tmp_path / "out.mrcs", 1 << 20)  # the smallest budget (2 MiB): several tiles
    assert len(keys) > 1 and all(k[1:] == (slice(0, 1), slice(0, 256), slice(0, 192)) for k in keys)
    expected = spectral.bandpass(data[:, None], 5.0, 40.0, pixel_size=1.25, edge_width=3).numpy()[:, 0]
    np.testing.assert_allclose(load(tmp_path / "out.mrcs"), expected, atol=1e-5)
    _, header, voxel = mrc_data(tmp_path / "out.mrcs")
    assert float(voxel.x) == pytest.approx(1.25) and header.mode == 2


def test_filter_of_a_volume_is_3d_with_a_bfactor(tmp_path):
    volume = np.random.default_rng(1).normal(size=(16, 16, 16)).astype(np.float32)
    write_mrc(tmp_path / "map.mrc", volume, voxel_size=2.0)
    result = noa("filter", tmp_path / "map.mrc", tmp_path / "sharp.mrc", "--lowpass", "6", "--bfactor", "-50")
    assert result.returncode == 0, result.stderr
    expected = spectral.bandpass(volume[None], 6.0, pixel_size=2.0, bfactor=-50.0).numpy()[0]
    np.testing.assert_allclose(load(tmp_path / "sharp.mrc"), expected, atol=1e-5)


def test_filter_refusals_leave_no_output(tmp_path):
    stack(tmp_path / "in.mrcs", voxel=1.5)
    assert_user_error(noa("filter", tmp_path / "in.mrcs", tmp_path / "out.mrcs", "--lowpass", "2.9"),
                      "lowpass", "finer than Nyquist", "3 Å")
    assert_user_error(noa("filter", tmp_path / "in.mrcs", tmp_path / "out.mrcs", "--lowpass", "8", "--highpass", "5"),
                      "highpass")
    write_mrc(tmp_path / "unknown.mrcs", np.ones((2, 8, 8), np.float32), stack=True)
    assert_user_error(noa("filter", tmp_path / "unknown.mrcs", tmp_path / "out.mrcs", "--lowpass", "8"),
                      "pixel size is unknown", "angpix")
    assert not (tmp_path / "out.mrcs").exists()
    given = noa("filter", tmp_path / "unknown.mrcs", tmp_path / "out.mrcs", "--lowpass", "8", "--angpix", "2")
    assert given.returncode == 0, given.stderr


# -- rescale ---------------------------------------------------------------------------------------------


def test_rescale_to_a_pixel_size_writes_relions_even_box_and_exact_pixel_size(tmp_path):
    data = stack(tmp_path / "in.mrcs", shape=(3, 50, 41), voxel=1.0)
    result = noa("rescale", tmp_path / "in.mrcs", tmp_path / "out.mrcs", "--pixel-size", "1.5")
    assert result.returncode == 0, result.stderr
    out, _header, voxel = mrc_data(tmp_path / "out.mrcs")
    assert out.shape == (3, 32, 26)  # round(50 / 1.5) = 33, round(41 / 1.5) = 27, made even
    assert ("50 x 41 pixels became 32 x 26 (even, as RELION rounds), so the pixel size is 1.5625, 1.57692 Å"
            in result.stderr)
    assert (float(voxel.y), float(voxel.x)) == pytest.approx((50 / 32, 41 / 26))  # what results, as RELION writes
    expected = scipy.signal.resample(scipy.signal.resample(data.astype(np.float64), 32, axis=1), 26, axis=2)
    np.testing.assert_allclose(out, expected, atol=1e-5)


@pytest.mark.parametrize("split", [False, True])
def test_rescale_plan_in_tiles_and_in_split_tasks(tmp_path, split):
    data = stack(tmp_path / "in.mrcs", shape=(40, 256, 256), voxel=2.0)
    plan = operations.get("rescale").task(factor=0.5).plan(tmp_path / "in.mrcs")
    assert plan.shape == (40, 1, 128, 128) and plan.meta.pixel_size[1:] == (4.0, 4.0)
    out = tmp_path / "out.mrcs"
    with plan.create(out, overwrite=True) as writer:
        keys = plan.keys(writer, 1 << 20)
        assert len(keys) > 1
        if not split:
            io.fill(writer, plan.sources, None, reads=plan.tile_reads(), keys=keys)
        else:  # what Dask tasks run: the region filled by path in two runs, statistics merged in order
            stats = RunningStatistics()
            half = len(keys) // 2
            for run in (keys[:half], keys[half:]):
                for tile_stats in writer.region().fill(operations.get("rescale").task(factor=0.5)
                                                       .plan(tmp_path / "in.mrcs").tile_reads(), run):
                    stats.merge(tile_stats)
            writer.complete(stats)
    expected = resampling.fourier_resize(data[:, None], (128, 128)).numpy()[:, 0]
    np.testing.assert_allclose(load(out), expected, atol=1e-5)


def test_rescale_of_a_volume_by_a_factor(tmp_path):
    volume = np.random.default_rng(4).normal(size=(20, 18, 16)).astype(np.float32)
    write_mrc(tmp_path / "map.mrc", volume, voxel_size=1.1)
    result = noa("rescale", tmp_path / "map.mrc", tmp_path / "half.mrc", "--factor", "0.5")
    assert result.returncode == 0, result.stderr
    out, _, voxel = mrc_data(tmp_path / "half.mrc")
    assert out.shape == (10, 8, 8)  # 9 -> 8
    assert (float(voxel.z), float(voxel.y), float(voxel.x)) == pytest.approx((2.2, 1.1 * 18 / 8, 2.2))
    np.testing.assert_allclose(out, resampling.fourier_resize(volume[None], (10, 8, 8)).numpy()[0], atol=1e-5)
    assert_user_error(noa("rescale", tmp_path / "map.mrc", tmp_path / "x.mrc", "--factor", "0.5", "--pixel-size", "2"),
                      "either")
    write_mrc(tmp_path / "unknown.mrc", volume)
    assert_user_error(noa("rescale", tmp_path / "unknown.mrc", tmp_path / "x.mrc", "--pixel-size", "2"),
                      "pixel size is unknown")
    assert not (tmp_path / "x.mrc").exists()


# -- powerspectrum ------------------------------------------------------------------------------------------


def test_powerspectrum_files(tmp_path):
    data = stack(tmp_path / "in.mrcs", shape=(3, 32, 32))
    assert noa("powerspectrum", tmp_path / "in.mrcs", tmp_path / "ps.mrcs", "--log").returncode == 0
    expected = np.log(np.fft.fftshift(np.abs(np.fft.fft2(data.astype(np.float64))) ** 2 / 1024, axes=(1, 2)))
    np.testing.assert_allclose(load(tmp_path / "ps.mrcs"), expected, rtol=1e-4, atol=1e-4)
    assert noa("powerspectrum", tmp_path / "in.mrcs", tmp_path / "avg.mrc", "--rotavg").returncode == 0
    profile = load(tmp_path / "avg.mrc")
    assert profile.size == 3 * 17
    expected = spectral.power_spectrum(data[:, None], rotational_average=True).numpy()
    np.testing.assert_allclose(profile.reshape(3, 17), expected.reshape(3, 17), rtol=1e-5)


def test_a_tile_reads_its_images_a_group_at_a_time(tmp_path, monkeypatch):
    """A rotational average writes a few values per image: however many images a tile holds, they are read
    and computed in groups of about GROUP_BYTES (here one image), never all at once."""
    from noa_core.io import mapped
    from noa_core.operations import plan as plan_module

    data = stack(tmp_path / "in.mrcs", shape=(6, 32, 32))
    monkeypatch.setattr(plan_module, "GROUP_BYTES", 1)
    read = []
    original = mapped.read_view
    monkeypatch.setattr(mapped, "read_view",
                        lambda array, *args, **kw: read.append(array.shape) or original(array, *args, **kw))
    plan = operations.get("powerspectrum").task(rotavg=True).plan(tmp_path / "in.mrcs")
    assert plan.shape == (6, 1, 1, 17)
    keys = filled_in_tiles(plan, tmp_path / "avg.mrc", 1 << 20)
    assert len(keys) == 1 and read == [(1, 1, 32, 32)] * 6
    expected = spectral.power_spectrum(data[:, None], rotational_average=True).numpy()
    np.testing.assert_allclose(load(tmp_path / "avg.mrc").reshape(6, 17), expected.reshape(6, 17), rtol=1e-5)


# -- transform ------------------------------------------------------------------------------------------------


def test_transform_stack_with_a_matrix_file(tmp_path):
    data = stack(tmp_path / "in.mrcs", shape=(4, 20, 24))
    forward = np.stack([transforms.affine_2d((20, 24), rotate=a, shift=(1.5, -2)) for a in (0, 20, 40, 60)])
    np.savetxt(tmp_path / "xf.txt", forward[:, :2].reshape(-1, 3))
    result = noa("transform", tmp_path / "in.mrcs", tmp_path / "out.mrcs", "--matrices", tmp_path / "xf.txt",
                 "--interp", "cubic")
    assert result.returncode == 0, result.stderr
    for b in range(4):
        expected = ndimage.affine_transform(data[b].astype(np.float64), forward[b, :2, :2], offset=forward[b, :2, 2],
                                            order=3, mode="grid-constant")
        np.testing.assert_allclose(load(tmp_path / "out.mrcs")[b], expected, atol=2e-4)
    np.savetxt(tmp_path / "three.txt", forward[:3, :2].reshape(-1, 3))
    assert_user_error(noa("transform", tmp_path / "in.mrcs", tmp_path / "bad.mrcs",
                          "--matrices", tmp_path / "three.txt"),
                      "3 matrices for the 4 images", "give 1 or 4")
    assert not (tmp_path / "bad.mrcs").exists()


def test_transform_rotate_shift_scale_and_volume_refusals(tmp_path):
    data = stack(tmp_path / "in.mrcs", shape=(2, 16, 16), voxel=1.7)
    result = noa("transform", tmp_path / "in.mrcs", tmp_path / "out.mrcs", "--rotate", "30", "--shift", "1,-2",
                 "--scale", "1.2")
    assert result.returncode == 0, result.stderr
    m = transforms.affine_2d((16, 16), rotate=30, shift=(1, -2), scale=1.2)
    for b in range(2):
        expected = ndimage.affine_transform(data[b].astype(np.float64), m[:2, :2], offset=m[:2, 2], order=1,
                                            mode="grid-constant")
        np.testing.assert_allclose(load(tmp_path / "out.mrcs")[b], expected, atol=1e-5)
    assert float(mrc_data(tmp_path / "out.mrcs")[2].x) == pytest.approx(1.7)
    volume = np.random.default_rng(0).normal(size=(8, 9, 10)).astype(np.float32)
    write_mrc(tmp_path / "map.mrc", volume)
    assert_user_error(noa("transform", tmp_path / "map.mrc", tmp_path / "bad.mrc", "--rotate", "30"),
                      "(1, 8, 9, 10) is a volume", "euler")
    assert_user_error(noa("transform", tmp_path / "in.mrcs", tmp_path / "bad.mrc", "--euler", "1,2,3"),
                      "(2, 1, 16, 16) is a stack of images", "rotate")
    assert_user_error(noa("transform", tmp_path / "in.mrcs", tmp_path / "bad.mrc"), "rotate")
    assert not (tmp_path / "bad.mrc").exists()
    assert noa("transform", tmp_path / "map.mrc", tmp_path / "turned.mrc", "--euler", "30,60,90").returncode == 0
    m3 = transforms.affine_3d(volume.shape, euler=(30, 60, 90))
    expected = ndimage.affine_transform(volume.astype(np.float64), m3[:3, :3], offset=m3[:3, 3], order=1,
                                        mode="grid-constant")
    np.testing.assert_allclose(load(tmp_path / "turned.mrc"), expected, atol=1e-5)


# -- real files -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["EMD-3197.map", "emd_3197.map.gz"])
def test_real_map_rescaled_filtered_and_turned(tmp_path, name):
    """EMD-3197 (20^3, 11.4 Å, a pre-2014 header; also gzipped): values against mrcfile's reading of it."""
    import mrcfile

    (path,) = need_shared(name)
    with mrcfile.open(path, permissive=True) as f:  # mrcfile reads .gz itself
        volume = np.array(f.data, dtype=np.float64)
    assert noa("rescale", path, tmp_path / "r.mrc", "--pixel-size", "20").returncode == 0  # 20 x 11.4 / 20 = 11.4 -> 10
    out, _, voxel = mrc_data(tmp_path / "r.mrc")
    assert out.shape == (10, 10, 10) and float(voxel.x) == pytest.approx(22.8)
    expected = volume
    for axis in range(3):
        expected = scipy.signal.resample(expected, 10, axis=axis)
    np.testing.assert_allclose(out, expected, atol=1e-4 * np.abs(volume).max())
    assert noa("filter", path, tmp_path / "f.mrc", "--lowpass", "40").returncode == 0
    expected = spectral.bandpass(volume[None], 40.0, pixel_size=11.4).numpy()[0]
    np.testing.assert_allclose(load(tmp_path / "f.mrc"), expected, atol=1e-5 * np.abs(volume).max())
    assert noa("transform", path, tmp_path / "t.mrc", "--euler", "10,20,30", "--interp", "cubic").returncode == 0
    m = transforms.affine_3d(volume.shape, euler=(10, 20, 30))
    expected = ndimage.affine_transform(volume, m[:3, :3], offset=m[:3, 3], order=3, mode="grid-constant")
    np.testing.assert_allclose(load(tmp_path / "t.mrc"), expected, atol=1e-4 * np.abs(volume).max())


def test_real_tiffs_integer_and_float_volumes(tmp_path):
    """tifffile's ZYX files: an uint16 volume filtered as float32, a float32 volume turned and its power spectrum."""
    import tifffile

    uint16, float32 = need_shared("zyx_uint16.tiff", "float32_10z_32y_40x.tiff")
    ints = tifffile.imread(uint16).astype(np.float64)
    assert noa("filter", uint16, tmp_path / "f.mrc", "--lowpass", "4", "--angpix", "1").returncode == 0
    out = load(tmp_path / "f.mrc")
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, spectral.bandpass(ints[None], 4.0, pixel_size=1.0).numpy()[0], rtol=1e-6, atol=1e-3)
    floats = tifffile.imread(float32).astype(np.float64)
    assert noa("transform", float32, tmp_path / "t.tif", "--euler", "90,0,0", "--border", "mirror").returncode == 0
    m = transforms.affine_3d(floats.shape, euler=(90, 0, 0))
    expected = ndimage.affine_transform(floats, m[:3, :3], offset=m[:3, 3], order=1, mode="reflect")
    np.testing.assert_allclose(tifffile.imread(tmp_path / "t.tif"), expected, atol=1e-4 * np.abs(floats).max())
    assert noa("powerspectrum", float32, tmp_path / "p.mrc").returncode == 0
    expected = np.fft.fftshift(np.abs(np.fft.fftn(floats)) ** 2 / floats.size)
    np.testing.assert_allclose(load(tmp_path / "p.mrc"), expected, rtol=1e-4, atol=1e-6 * expected.max())


# -- HTTP -------------------------------------------------------------------------------------------------------


def test_http_uploads_paths_and_jobs(tmp_path):
    from fastapi.testclient import TestClient

    from noa_server.app import create_app
    from noa_server.settings import Settings

    root = tmp_path / "root"
    root.mkdir()
    data = stack(root / "in.mrcs", shape=(2, 16, 16), voxel=1.0)
    with TestClient(create_app(Settings(warmup=False, data_root=root))) as client:
        paths = client.get("/openapi.json").json()["paths"]
        assert {f"/v1/{door}/{name}" for door in ("upload", "paths")
                for name in ("rescale", "filter", "powerspectrum", "transform")} <= paths.keys()
        uploaded = client.post("/v1/upload/filter", data={"lowpass": "4"},
                               files={"file": ("in.mrcs", (root / "in.mrcs").read_bytes())})
        assert uploaded.status_code == 200, uploaded.text
        (tmp_path / "up.mrcs").write_bytes(uploaded.content)
        np.testing.assert_allclose(load(tmp_path / "up.mrcs"),
                                   spectral.bandpass(data[:, None], 4.0, pixel_size=1.0).numpy()[:, 0], atol=1e-5)

        m = transforms.affine_2d((16, 16), rotate=45)[:2]
        written = client.post("/v1/paths/transform", json={"src": "in.mrcs", "dst": "t.mrcs",
                                                           "matrix_values": m.reshape(-1).tolist()})
        assert written.status_code == 201, written.text
        expected = ndimage.affine_transform(data[1].astype(np.float64), m[:, :2], offset=m[:, 2], order=1,
                                            mode="grid-constant")
        np.testing.assert_allclose(load(root / "t.mrcs")[1], expected, atol=1e-5)
        refused = client.post("/v1/paths/transform", json={"src": "in.mrcs", "dst": "u.mrcs",
                                                           "matrix_values": [1, 0, 0, 0, 1, 0] * 3})
        assert_problem(refused, 400)
        assert not (root / "u.mrcs").exists()
        nyquist = client.post("/v1/paths/filter", json={"src": "in.mrcs", "dst": "u.mrcs", "lowpass": 1.5})
        assert "Nyquist" in assert_problem(nyquist, 400)["detail"]
        assert client.post("/v1/paths/transform", json={"src": "in.mrcs", "dst": "u.mrcs", "matrices": "xf.txt"}
                           ).status_code in (400, 422)  # a server-side matrix file is not offered over HTTP

        job = client.post("/v1/jobs", json={"operation": "rescale", "src": "in.mrcs", "dst": "r.mrcs", "factor": 0.5})
        assert job.status_code == 202, job.text
        state = wait_job(client, job.headers["location"], 60)
        assert state["status"] == "succeeded", state
        expected = resampling.fourier_resize(data[:, None], (8, 8)).numpy()[:, 0]
        np.testing.assert_allclose(load(root / "r.mrcs"), expected, atol=1e-5)


def test_live_service_powerspectrum_and_transform(tmp_path):
    """A real `noa serve` process: an upload and a path request, answered as the CLI writes them."""
    root = tmp_path / "root"
    root.mkdir()
    stack(root / "in.mrcs", shape=(2, 24, 24), voxel=1.0)
    # the service compiles its kernels before it is ready
    proc, url = start_server(root, tmp_path / "server.log", {"NOA_TMP_DIR": str(tmp_path)}, timeout=600)
    try:
        with httpx.Client(base_url=url, timeout=120) as client:
            uploaded = client.post("/v1/upload/powerspectrum", data={"log": "true"},
                                   files={"file": ("in.mrcs", (root / "in.mrcs").read_bytes())})
            assert uploaded.status_code == 200, uploaded.text
            (tmp_path / "up.mrcs").write_bytes(uploaded.content)
            written = client.post("/v1/paths/transform", json={"src": "in.mrcs", "dst": "t.mrcs",
                                                               "matrix_values": [1, 0, 0.5, 0, 1, -1]})
            assert written.status_code == 201, written.text
    finally:
        proc.terminate()
        proc.wait(30)
    for args, served in ((("powerspectrum", "--log"), tmp_path / "up.mrcs"), (("transform",), root / "t.mrcs")):
        out = tmp_path / f"cli_{args[0]}.mrcs"
        np.savetxt(tmp_path / "m.txt", [[1, 0, 0.5], [0, 1, -1]])
        extra = ["--matrices", tmp_path / "m.txt"] if args[0] == "transform" else list(args[1:])
        assert noa(args[0], root / "in.mrcs", out, *extra).returncode == 0
        np.testing.assert_array_equal(load(served), load(out))
