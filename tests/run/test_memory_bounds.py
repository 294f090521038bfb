"""Memory of whole-image operations, stores of absurd shapes, and compressed MRC spill files (issue 32, items
13, 9 and the spill leftover): nothing is spent in proportion to a parameter or a header before it is
checked against what the operation will hold, and refusals are one line naming the file and option."""

from __future__ import annotations

import gzip
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.signal
import zarr

from helpers import NOA, assert_problem, assert_user_error, mrc_data, noa, write_mrc
from noa_core import limits, operations
from noa_core.errors import LimitError, SizeError
from noa_core.fourier import resampling
from noa_core.io import compression

MIB = 1 << 20


def _peak_rss(*args: str, returncode: int = 0) -> int:
    """The peak resident memory (bytes) of ``noa ARGS`` run as a user runs it (exiting with ``returncode``),
    measured in a child process of its own (RUSAGE_CHILDREN keeps the largest child ever waited for)."""
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[2:], capture_output=True); "
             "assert r.returncode == int(sys.argv[1]), r.stderr; "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", probe, str(returncode), *NOA, *map(str, args)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return int(out.stdout) * 1024


# -- item 13: whole-image operations --------------------------------------------------------------------------


SQUARE = [((2, 1, 64, 64), 0.25), ((1, 12, 12, 12), 2.0), ((3, 1, 20, 20), 1.6)]


@pytest.mark.parametrize("shape, factor, like", [((1, 1, 30, 48), 3.0, "noa"), ((1, 1, 33, 17), 0.5, "noa"),
                                                 *[(*case, "noa") for case in SQUARE],
                                                 *[(*case, "relion") for case in SQUARE]])
def test_rescale_in_place_inverse_equals_scipy(shape, factor, like, monkeypatch):
    """The inverse transform now runs in place, a few rows at a time: the values are still scipy's
    (noa: scipy.signal.resample per axis; relion: the same windows through NumPy's irfftn, float64)."""
    monkeypatch.setattr(resampling, "ROW_BYTES", 200)  # a few rows a step: steps that end mid-image and mid-batch
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    got = resampling.rescale(x, factor, like=like).numpy()
    axes = (2, 3) if shape[1] == 1 else (1, 2, 3)
    sizes = resampling.rescaling([shape[a] for a in axes], factor, like).sizes
    if like == "noa":
        want = x.astype(np.float64)
        for a, n in zip(axes, sizes):
            want = scipy.signal.resample(want, n, axis=a)
    else:
        spectrum = np.fft.rfftn(x.astype(np.float64), axes=axes)
        window = resampling._window_sphere(spectrum, axes, shape[axes[0]], sizes[0])
        want = np.fft.irfftn(window, s=sizes, axes=axes) * (np.prod(sizes) / np.prod([shape[a] for a in axes]))
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.max(np.abs(got - want)) < 2e-5 * max(1.0, np.max(np.abs(want)))


def test_rescale_float64_stays_float64():
    x = np.random.default_rng(2).standard_normal((1, 1, 16, 16))
    got = resampling.rescale(x, 2.0).numpy()
    want = scipy.signal.resample(scipy.signal.resample(x, 32, axis=2), 32, axis=3)
    assert got.dtype == np.float64 and np.max(np.abs(got - want)) < 1e-12


def test_rescale_by_16_holds_little_more_than_twice_its_output(tmp_path):
    """256 x 256 -> 4096 x 4096 (64 MiB): the spectrum, the result and the output tile, never pocketfft's
    second spectrum or a scaled copy (before: 3.2x the output above the process's own memory, now 2.3x)."""
    write_mrc(tmp_path / "img.mrc", np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32))
    base = _peak_rss("rescale", tmp_path / "img.mrc", tmp_path / "same.mrc", "--factor", "1")
    peak = _peak_rss("rescale", tmp_path / "img.mrc", tmp_path / "big.mrc", "--factor", "16")
    assert mrc_data(tmp_path / "big.mrc")[0].shape == (4096, 4096)
    assert (peak - base) < 2.75 * 64 * MIB, ((peak - base) / MIB, base / MIB)


def test_rescale_that_would_need_a_terabyte_is_refused_before_planning(tmp_path):
    """A 256 KiB volume rescaled by 64 is a 256 GiB output whose one volume would be computed in memory:
    refused from the header, in one line naming the file and the option (before: it tried to allocate)."""
    write_mrc(tmp_path / "vol.mrc", np.zeros((64, 64, 64), np.int8))
    import resource

    def cap() -> None:  # today's code must fail, not take the machine's memory
        resource.setrlimit(resource.RLIMIT_AS, (32 << 30, 32 << 30))

    result = subprocess.run([*NOA, "rescale", str(tmp_path / "vol.mrc"), str(tmp_path / "out.mrc"), "--factor",
                             "64"], capture_output=True, text=True, timeout=120, preexec_fn=cap)
    assert_user_error(result, "vol.mrc", "--factor 64", "memory at once", "available")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vol.mrc"]


def _plan(name: str, path: Path, **values):
    return operations.get(name).task(**values).plan(path)


def test_working_memory_is_checked_against_the_memory_available(tmp_path, monkeypatch):
    """Each whole-image operation counts what one image holds (input, transforms, output tiles) against
    MemAvailable, with the figures in the message; where that is unknown, nothing is refused."""
    write_mrc(tmp_path / "img.mrc", np.zeros((256, 256), np.float32), voxel_size=1.0)
    monkeypatch.setattr(limits, "available_memory", lambda: 100 * MIB)
    with pytest.raises(LimitError, match=r"img\.mrc: noa rescale --factor 16: .* need 256 MiB .* 100 MiB available"):
        _plan("rescale", tmp_path / "img.mrc", factor=16.0)
    _plan("rescale", tmp_path / "img.mrc", factor=4.0)  # 2 x 256 KiB + 4 x 4 MiB
    monkeypatch.setattr(limits, "available_memory", lambda: MIB // 2)
    for name, values in (("filter", {"lowpass": 4.0}), ("powerspectrum", {}), ("normalize", {"bg_radius": 100}),
                         ("transform", {"rotate": 10.0})):
        with pytest.raises(LimitError, match="memory at once"):
            _plan(name, tmp_path / "img.mrc", **values)
    monkeypatch.setattr(limits, "available_memory", lambda: None)
    _plan("rescale", tmp_path / "img.mrc", factor=16.0)


def test_available_memory_reads_meminfo():
    with open("/proc/meminfo") as file:
        total = next(int(line.split()[1]) * 1024 for line in file if line.startswith("MemTotal:"))
    free = limits.available_memory()
    assert free is not None and 0 < free <= total


def test_service_refuses_what_memory_cannot_hold(tmp_path, monkeypatch):
    """The service checks the memory one image needs (32 x 32 rescaled by 16 holds about 4 MiB) against the
    memory available: 507 insufficient-memory, not a process swapping or killed; by 2 it runs."""
    warnings.filterwarnings("ignore", message=".*httpx.*")
    from fastapi.testclient import TestClient

    from noa_server.app import create_app
    from noa_server.settings import Settings

    monkeypatch.setattr(limits, "available_memory", lambda: 2 * MIB)
    write_mrc(tmp_path / "img.mrc", np.random.default_rng(3).standard_normal((32, 32)).astype(np.float32))
    sent = (tmp_path / "img.mrc").read_bytes()
    with TestClient(create_app(Settings(warmup=False, tmp_dir=tmp_path)), raise_server_exceptions=False) as c:
        body = assert_problem(c.post("/v1/upload/rescale", data={"factor": "16"},
                                     files={"file": ("img.mrc", sent)}), 507, "insufficient-memory")
        assert "2 MiB available" in body["detail"] and "--factor 16" in body["detail"]
        assert c.post("/v1/upload/rescale", data={"factor": "2"}, files={"file": ("img.mrc", sent)}).status_code == 200


# -- item 9: a store of shape [2**40, 2**40] ------------------------------------------------------------------


@pytest.fixture(params=[2, 3])
def huge_store(tmp_path, request) -> Path:
    """A zarr array claiming 2**80 float32 values (4 MiB of metadata, no chunks)."""
    path = tmp_path / "huge.zarr"
    zarr.create_array(store=str(path), shape=(2**40, 2**40), chunks=(64, 64), dtype="float32",
                      zarr_format=request.param, fill_value=0)
    return path


def test_a_store_of_absurd_shape_is_one_line_user_error(huge_store, tmp_path):
    """info said "array is too big", stats and copy raised MemoryError: all exit 1 "internal error"."""
    for args in (("info", huge_store), ("stats", huge_store), ("copy", huge_store, tmp_path / "c.mrc")):
        assert_user_error(noa(*args), "huge.zarr: shape", "(1099511627776, 1099511627776)", "256 TiB")
    assert not (tmp_path / "c.mrc").exists()
    from noa_core import io

    with pytest.raises(SizeError, match="shape"):
        io.probe(huge_store)


def test_a_store_of_absurd_shape_over_http_is_a_4xx(huge_store, tmp_path):
    warnings.filterwarnings("ignore", message=".*httpx.*")
    from fastapi.testclient import TestClient

    from noa_server.app import create_app
    from noa_server.settings import Settings

    with TestClient(create_app(Settings(warmup=False, data_root=tmp_path)), raise_server_exceptions=False) as c:
        response = c.post("/v1/paths/stats", json={"path": "huge.zarr"})
        assert 400 <= response.status_code < 500, response.text
        assert "shape" in response.json()["detail"]


def test_a_large_store_is_refused_for_room_before_its_blocks_are_listed(tmp_path):
    """256 TiB (the most noa reads) of a sparse store: refused for room in the temporary folder at once,
    not after listing its 4 million blocks (before: 1.1 GB and 15 s)."""
    zarr.create_array(store=str(tmp_path / "big.zarr"), shape=(2**23, 2**23), chunks=(64, 64), dtype="float32",
                      zarr_format=2, fill_value=0)
    assert_user_error(noa("stats", tmp_path / "big.zarr"), "big.zarr: shape", "needs more room")
    assert _peak_rss("stats", tmp_path / "big.zarr", returncode=2) < 300 * MIB


# -- the spill file of a compressed MRC -----------------------------------------------------------------------


def test_a_compressed_mrc_is_decompressed_into_an_unlinked_file(tmp_path, monkeypatch):
    """While a .mrc.gz is decompressed for mapping, its temporary folder holds no file a killed process
    would leave behind (before: a named noa-*.decompressed); the values are mapped through the descriptor."""
    from noa_core import io

    data = np.random.default_rng(4).standard_normal((6, 40, 50)).astype(np.float32)
    write_mrc(tmp_path / "m.mrc", data)
    (tmp_path / "m.mrc.gz").write_bytes(gzip.compress((tmp_path / "m.mrc").read_bytes()))
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill))
    seen: list[list[str]] = []
    read = compression.Decompressed.read

    def watching(self, size):
        seen.append(sorted(p.name for p in spill.iterdir()))
        return read(self, size)

    monkeypatch.setattr(compression.Decompressed, "read", watching)
    array, _ = io.read(tmp_path / "m.mrc.gz")
    assert np.array_equal(array.numpy().reshape(data.shape), data)
    assert seen and all(names == [] for names in seen), seen
    assert list(spill.iterdir()) == []


# -- issue 46, item 1: an OME-Zarr pyramid from one read ------------------------------------------------------


def test_a_pyramid_of_a_volume_larger_than_its_tiles_holds_a_few_tiles(tmp_path):
    """A 128 MiB volume to a 4-level pyramid: every level is made from the tile just read (8 MiB chunks), so
    the process holds a few tiles and their halves, never a level or the volume (before: --levels unknown)."""
    volume = np.lib.format.open_memmap(tmp_path / "v.npy", "w+", np.float32, (128, 512, 512))
    for z in range(0, 128, 16):
        volume[z:z + 16] = np.random.default_rng(z).random((16, 512, 512), dtype=np.float32)
    write_mrc(tmp_path / "v.mrc", volume)
    write_mrc(tmp_path / "small.mrc", volume[:8, :64, :64])
    base = _peak_rss("copy", tmp_path / "small.mrc", tmp_path / "small.ome.zarr", "--levels", "4")
    peak = _peak_rss("copy", tmp_path / "v.mrc", tmp_path / "v.ome.zarr", "--levels", "4")
    levels = zarr.open_group(str(tmp_path / "v.ome.zarr"), mode="r")
    assert [levels[str(k)].shape for k in range(4)] == [(128, 512, 512), (64, 256, 256), (32, 128, 128),
                                                        (16, 64, 64)]
    np.testing.assert_allclose(levels["3"][5], volume[40:48, :8 * 64, :8 * 64].reshape(8, 64, 8, 64, 8)
                               .mean(axis=(0, 2, 4)), rtol=1e-5)
    one_level = _peak_rss("copy", tmp_path / "v.mrc", tmp_path / "one.ome.zarr")
    # measured: 56 MiB over a small file's pyramid, and no more than the one-level copy (whose chunks are larger)
    assert (peak - base) < 80 * MIB, ((peak - base) / MIB, base / MIB)
    assert peak < one_level + 16 * MIB, (peak / MIB, one_level / MIB)
