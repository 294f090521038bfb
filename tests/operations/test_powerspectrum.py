"""noa powerspectrum --table: RELION's rotational-average power table (relion_image_handler --power), STAR and CSV.

Oracles: RELION's getSpectrum and image_handler loop transcribed from its source (always run), NumPy, and
relion_image_handler --power itself (skipped where RELION is absent), its STAR output parsed with starfile.
"""

from __future__ import annotations

import csv
import io as text_io
import json
import warnings

import numpy as np
import pytest
import starfile

from helpers import assert_user_error, noa, relion, relion_transform_elements, write_mrc
from noa_core import operations
from noa_core.errors import ParameterError
from noa_core.fourier import spectral
from noa_core.run import local

# RELION prints 6 decimals (%12.6f) or 6 significant digits (%12.6e): half a unit of the last either way.
PRINTED = {"atol": 5e-7, "rtol": 5e-7}


def relion_get_spectrum(image: np.ndarray) -> np.ndarray:
    """src/fftw.cpp getSpectrum(POWER_SPECTRUM) then src/apps/image_handler.cpp's --power loop, transcribed:
    the forward transform divided by N (FourierTransformer), FOR_ALL_ELEMENTS_IN_FFTW_TRANSFORM's logical
    indices, idx = ROUND(sqrt(kp^2 + ip^2 + jp^2)), spectrum(idx) += norm(F), the mean over count, rows
    0 .. XSIZE/2 + 1 (``if (i > XSIZE / 2 + 1) break``)."""
    volume = image if image.ndim == 3 else image[None]
    zdim, ydim, xdim = volume.shape
    faux = np.fft.rfftn(volume.astype(np.float64)) / volume.size
    half = faux.shape[2]  # XSIZE(Faux)
    spectrum, count = np.zeros(xdim), np.zeros(xdim)
    for k, i, j, idx in relion_transform_elements(zdim, ydim, half):
        spectrum[idx] += abs(faux[k, i, j]) ** 2
        count[idx] += 1
    spectrum[count > 0] /= count[count > 0]
    return spectrum[:min(xdim // 2 + 2, xdim)]


def relion_blocks(stdout: str, tmp_path) -> list:
    """Every ``data_power`` block RELION printed (one per image, all named alike), parsed by starfile."""
    parts = stdout.split("data_power")[1:]
    tables = []
    for n, part in enumerate(parts):
        path = tmp_path / f"relion_{n}.star"
        path.write_text("data_power" + part)
        tables.append(starfile.read(path))
    return tables


def noa_blocks(path) -> list:
    blocks = starfile.read(path, always_dict=True)
    return [blocks[name] for name in blocks]


# -- the library: RELION's numbers ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 1, 32, 32), (1, 1, 15, 15), (3, 1, 16, 16), (1, 12, 12, 12), (2, 9, 9, 9)])
def test_relion_power_is_relions_get_spectrum(shape):
    values = np.random.default_rng(sum(shape)).normal(3.0, 2.0, size=shape)
    got = spectral.relion_power(values)
    images = values.reshape(shape[0], *shape[1 if shape[1] > 1 else 2:])
    assert got.shape == (shape[0], min(shape[3] // 2 + 2, shape[3]))
    for b in range(shape[0]):
        np.testing.assert_allclose(got[b], relion_get_spectrum(images[b]), rtol=1e-12, atol=1e-15)


def test_relion_power_normalisation_against_numpy():
    """|F/N|^2: a constant c gives c^2 at shell 0 and nothing else; a cosine A cos(2 pi k x / n) gives
    (A/2)^2 on its one half-transform sample, shared among the samples of shell k; noa's own spectrum
    is N times larger per sample (|F|^2/N)."""
    n, k, amplitude = 32, 5, 3.0
    constant = np.full((1, 1, n, n), 2.5)
    np.testing.assert_allclose(spectral.relion_power(constant)[0], [6.25] + [0.0] * (n // 2 + 1), atol=1e-12)
    x = np.arange(n)
    wave = np.broadcast_to(amplitude * np.cos(2 * np.pi * k * x / n), (1, 1, n, n))
    ky, kx = np.meshgrid(np.fft.fftfreq(n) * n, np.fft.rfftfreq(n) * n, indexing="ij")
    samples = int((np.floor(np.hypot(ky, kx) + 0.5) == k).sum())
    expected = np.zeros(n // 2 + 2)
    expected[k] = (amplitude / 2) ** 2 / samples
    np.testing.assert_allclose(spectral.relion_power(wave)[0], expected, atol=1e-12)
    noa_power = spectral.power_spectrum(wave).numpy().astype(np.float64)
    assert noa_power.max() == pytest.approx((amplitude / 2) ** 2 * n * n, rel=1e-5)  # |F|^2/N = N |F/N|^2


def test_shell_resolutions_as_relion_writes_them():
    inverse, angstrom = spectral.shell_resolutions(32, 1.5, 18)
    assert angstrom[0] == 999.0 and inverse[0] == pytest.approx(1 / 999)
    np.testing.assert_allclose(angstrom[1:], 48.0 / np.arange(1, 18))
    np.testing.assert_allclose(inverse[1:], np.arange(1, 18) / 48.0)


# -- the files: against relion_image_handler --power ------------------------------------------------------


@pytest.mark.parametrize("case", ["image", "stack", "volume", "odd"])
def test_star_table_matches_relion_image_handler(tmp_path, case):
    rng = np.random.default_rng(7)
    shape, name = {"image": ((32, 32), "in.mrc"), "stack": ((3, 24, 24), "in.mrcs"),
                   "volume": ((16, 16, 16), "in.mrc"), "odd": ((25, 25), "in.mrc")}[case]
    data = write_mrc(tmp_path / name, (rng.normal(size=shape) * 40 + 5).astype(np.float32),
                     stack=case == "stack", voxel_size=1.35)
    result = noa("powerspectrum", tmp_path / name, tmp_path / "ps.star", "--table", "star")
    assert result.returncode == 0, result.stderr
    ours = noa_blocks(tmp_path / "ps.star")
    # cwd: relion_image_handler leaves a scratch file '.spi' in its working folder
    printed = relion("relion_image_handler", "--i", tmp_path / name, "--power", cwd=tmp_path).stdout
    theirs = relion_blocks(printed, tmp_path)
    images = 3 if case == "stack" else 1
    assert len(ours) == len(theirs) == images
    names = list(starfile.read(tmp_path / "ps.star", always_dict=True))
    assert names == (["power"] if images == 1 else [f"power_{b}" for b in range(images)])
    worst = 0.0
    for b in range(images):
        assert list(ours[b].columns) == list(theirs[b].columns) == [
            "rlnSpectralIndex", "rlnResolution", "rlnAngstromResolution", "rlnReferenceSpectralPower"]
        np.testing.assert_array_equal(ours[b]["rlnSpectralIndex"], theirs[b]["rlnSpectralIndex"])
        for column in ("rlnResolution", "rlnAngstromResolution", "rlnReferenceSpectralPower"):
            np.testing.assert_allclose(ours[b][column], theirs[b][column], **PRINTED, err_msg=column)
        worst = max(worst, float(np.max(np.abs(ours[b]["rlnReferenceSpectralPower"]
                                               - theirs[b]["rlnReferenceSpectralPower"]))))
        image = data[b] if case == "stack" else data
        np.testing.assert_allclose(ours[b]["rlnReferenceSpectralPower"], relion_get_spectrum(image), rtol=1e-7)
    print(f"{case}: max |noa - RELION| power = {worst:.3g}")


# -- the files: CSV, unknown pixel sizes, batches, refusals -------------------------------------------------


def test_csv_table_holds_the_star_values(tmp_path):
    data = write_mrc(tmp_path / "in.mrcs", np.random.default_rng(3).normal(size=(2, 20, 20)).astype(np.float32),
                     stack=True, voxel_size=2.0)
    assert noa("powerspectrum", tmp_path / "in.mrcs", tmp_path / "ps.csv", "--table", "csv").returncode == 0
    rows = list(csv.DictReader(text_io.StringIO((tmp_path / "ps.csv").read_text())))
    assert list(rows[0]) == ["image", "shell", "resolution_per_angstrom", "resolution_angstrom", "power"]
    assert len(rows) == 2 * 12 and [int(r["image"]) for r in rows] == [0] * 12 + [1] * 12
    for b in range(2):
        mine = [r for r in rows if int(r["image"]) == b]
        assert [int(r["shell"]) for r in mine] == list(range(12))
        np.testing.assert_allclose([float(r["power"]) for r in mine], relion_get_spectrum(data[b]), rtol=1e-7)
        np.testing.assert_allclose([float(r["resolution_angstrom"]) for r in mine],
                                   [999.0] + [40.0 / i for i in range(1, 12)], rtol=1e-8)
        np.testing.assert_allclose([float(r["resolution_per_angstrom"]) for r in mine],
                                   [1 / 999.0] + [i / 40.0 for i in range(1, 12)], rtol=1e-8)


def test_unknown_pixel_size_gives_shells_only_and_a_notice(tmp_path):
    data = write_mrc(tmp_path / "in.mrc", np.random.default_rng(4).normal(size=(16, 16)).astype(np.float32))
    result = noa("powerspectrum", tmp_path / "in.mrc", tmp_path / "ps.star", "--table", "star")
    assert result.returncode == 0 and "pixel size is unknown" in result.stderr, result.stderr
    table = starfile.read(tmp_path / "ps.star")
    assert list(table.columns) == ["rlnSpectralIndex", "rlnReferenceSpectralPower"]
    np.testing.assert_allclose(table["rlnReferenceSpectralPower"], relion_get_spectrum(data), rtol=1e-7)
    result = noa("powerspectrum", tmp_path / "in.mrc", tmp_path / "ps.csv", "--table", "csv", "--angpix", "0.5")
    assert result.returncode == 0 and "pixel size is unknown" not in result.stderr, result.stderr
    rows = list(csv.DictReader(text_io.StringIO((tmp_path / "ps.csv").read_text())))
    assert float(rows[2]["resolution_angstrom"]) == pytest.approx(16 * 0.5 / 2)


def test_batch_writes_one_table_per_input(tmp_path):
    for name in ("a.mrc", "b.mrc"):
        write_mrc(tmp_path / name, np.random.default_rng(len(name)).normal(size=(16, 16)).astype(np.float32),
                  voxel_size=1.0)
    (tmp_path / "out").mkdir()
    result = noa("powerspectrum", tmp_path / "a.mrc", tmp_path / "b.mrc", "--out-dir", tmp_path / "out",
                 "--table", "csv")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.csv", "b.csv"]


def test_refusals_on_the_cli(tmp_path):
    write_mrc(tmp_path / "in.mrc", np.ones((16, 16), np.float32), voxel_size=1.0)
    assert_user_error(noa("powerspectrum", tmp_path / "in.mrc", tmp_path / "ps.star"), "--table", "add --table star")
    assert_user_error(noa("powerspectrum", tmp_path / "in.mrc", tmp_path / "ps.mrc", "--table", "csv"),
                      "--table", ".csv file")
    assert_user_error(noa("powerspectrum", tmp_path / "in.mrc", tmp_path / "ps.csv", "--table", "csv", "--log"),
                      "--log")
    assert_user_error(noa("powerspectrum", tmp_path / "in.mrc", tmp_path / "ps.csv", "--table", "tsv"), "--table")
    assert_user_error(noa("powerspectrum", tmp_path / "in.mrc", tmp_path / "ps.csv", "--table", "csv",
                          "--angpix", "0"), "--angpix")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mrc"]  # nothing left behind


# -- the doors: Python, tiles filled by other processes, HTTP ---------------------------------------------------


def test_python_task_and_tiles_filled_as_dask_tasks_fill_them(tmp_path):
    data = write_mrc(tmp_path / "in.mrcs", np.random.default_rng(5).normal(size=(40, 64, 64)).astype(np.float32),
                     stack=True, voxel_size=1.1)
    task = operations.get("powerspectrum").task(table="star")
    local.write(task, tmp_path / "in.mrcs", tmp_path / "local.star")
    plan = task.plan(tmp_path / "in.mrcs")
    assert plan.shape == (40, 1, 1, 34) and plan.dtype == np.float64
    with plan.create(tmp_path / "tiles.star", overwrite=False) as writer:
        whole = plan.keys(writer, 1 << 20)[0][1:]
        region = writer.region()  # what a Dask task is given: filled from "another process", two runs of images
        region.fill(plan.tile_reads(), [(slice(0, 15), *whole)])
        region.fill(plan.tile_reads(), [(slice(15, 40), *whole)])
    assert (tmp_path / "tiles.star").read_text() == (tmp_path / "local.star").read_text()
    blocks = noa_blocks(tmp_path / "tiles.star")
    assert len(blocks) == 40
    for b in (0, 17, 39):
        np.testing.assert_allclose(blocks[b]["rlnReferenceSpectralPower"], relion_get_spectrum(data[b]), rtol=1e-7)
    with pytest.raises(ParameterError, match="table"):
        operations.get("powerspectrum").task(table="star").plan(tmp_path / "in.mrcs").create(
            tmp_path / "x.mrcs", overwrite=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mrcs", "local.star", "tiles.star"]


def test_upload_returns_the_table(tmp_path):
    warnings.filterwarnings("ignore", message=".*httpx.*")
    from fastapi.testclient import TestClient

    from noa_server.app import create_app
    from noa_server.settings import Settings

    data = write_mrc(tmp_path / "mic.mrc", np.random.default_rng(6).normal(size=(32, 32)).astype(np.float32),
                     voxel_size=1.5)
    (tmp_path / "root").mkdir()
    (tmp_path / "tmp").mkdir()
    settings = Settings(data_root=tmp_path / "root", api_key="k", tmp_dir=tmp_path / "tmp", warmup=False)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        response = client.post("/v1/upload/powerspectrum", data={"table": "csv"},
                               files={"file": ("mic.mrc", (tmp_path / "mic.mrc").read_bytes())},
                               headers={"X-API-Key": "k"})
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/csv")
        assert response.headers["content-disposition"] == 'attachment; filename="mic_powerspectrum.csv"'
        assert json.loads(response.headers["noa-notices"]) == []
        rows = list(csv.DictReader(text_io.StringIO(response.text)))
        np.testing.assert_allclose([float(r["power"]) for r in rows], relion_get_spectrum(data), rtol=1e-7)
        refused = client.post("/v1/upload/powerspectrum", data={"table": "csv", "log": "true"},
                              files={"file": ("mic.mrc", (tmp_path / "mic.mrc").read_bytes())},
                              headers={"X-API-Key": "k"})
        assert 400 <= refused.status_code < 500 and "log" in refused.text
    assert list((tmp_path / "tmp").iterdir()) == []
