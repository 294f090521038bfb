"""noa split, join, scale and normalize : plans and results against NumPy and
mrcfile, the streamed percentiles against np.percentile, all-or-none outputs, the CLI and both HTTP modes."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import mrcfile
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import noa_core as noa_api
from helpers import (
    assert_problem,
    assert_user_error,
    fei1_stack,
    load,
    mrc_data,
    need_shared,
    noa,
    wait_job,
    write_mrc,
)
from noa_core import io as noa_io
from noa_core import operations
from noa_core.array import asarray
from noa_core.errors import DTypeError, ParameterError, SectionMismatchError, ValueRangeError
from noa_core.images import statistics
from noa_core.run import local

SMALL = settings(max_examples=20, deadline=None)
shapes = st.tuples(st.integers(1, 5), st.integers(1, 3), st.integers(1, 7), st.integers(1, 7))


def write_noa(path: Path, data: np.ndarray, order: str = "C", dtype=None) -> np.ndarray:
    """A BDHW array written by noa (F order stores each section column-major)."""
    noa_io.write(path, asarray(np.ascontiguousarray(data)), order=order, dtype=dtype, overwrite=True)
    return data


def read(path: Path) -> np.ndarray:
    array, _ = noa_io.read(path)
    return np.array(array.numpy())


def tilts(path: Path) -> list[float]:
    with mrcfile.open(path, permissive=True) as f:
        return [float(t) for t in f.indexed_extended_header["Alpha tilt"]]


# -- split -------------------------------------------------------------------------------------------


@SMALL
@given(shape=shapes, every=st.integers(1, 4), order=st.sampled_from("CF"))
def test_split_parts_are_numpys_slices(tmp_path_factory, shape, every, order):
    folder = tmp_path_factory.mktemp("split")
    data = write_noa(folder / "in.mrc", np.random.default_rng(0).normal(size=shape).astype(np.float32), order)
    outputs, _ = local.write_several(operations.get("split").task(every=every), folder / "in.mrc", folder / "out")
    b, d, h, w = shape
    if b == 1 and d > 1:  # a single volume: its Z sections, as an image stack
        expected = [data[0, start:start + every].reshape(-1, 1, h, w) for start in range(0, d, every)]
    else:
        expected = [data[start:start + every] for start in range(0, b, every)]
    assert [p.name for p in outputs] == [f"in_{i:03d}.mrc" for i in range(len(expected))]
    assert sorted(p.name for p in (folder / "out").iterdir()) == [p.name for p in outputs]  # nothing else
    for path, part in zip(outputs, expected, strict=True):
        got = read(path)
        assert got.shape == part.shape
        np.testing.assert_array_equal(got, part)
        mrcfile.validate(str(path))


@pytest.mark.parametrize("dtype", ["int8", "int16", "uint16", "float16", "float32", "complex64", "uint8"])
def test_split_keeps_every_mrc_mode_and_the_pixel_size(tmp_path, dtype):
    values = (np.arange(3 * 2 * 5) % 100).reshape(3, 2, 5)
    data = write_mrc(tmp_path / "in.mrcs", values.astype(dtype), stack=True, voxel_size=(1.5, 2.5, 3.5))
    done = noa("split", tmp_path / "in.mrcs", "--out-dir", tmp_path / "out", "--every", "2")
    assert done.returncode == 0, done.stderr
    parts = sorted((tmp_path / "out").iterdir())
    assert [p.name for p in parts] == ["in_000.mrcs", "in_001.mrcs"]
    np.testing.assert_array_equal(np.concatenate([load(p).reshape(-1, 2, 5) for p in parts]), data)
    for part in parts:
        got, _header, voxel = mrc_data(part)
        assert got.dtype == data.dtype  # mrcfile stores uint8 widened itself: the same mode comes back
        assert (float(voxel.x), float(voxel.y)) == (1.5, 2.5)


def test_split_fei1_records_follow_their_sections(tmp_path):
    _data, _records = fei1_stack(tmp_path / "tilts.mrcs", 5)
    done = noa("split", tmp_path / "tilts.mrcs", "--out-dir", tmp_path / "out", "--every", "2")
    assert done.returncode == 0, done.stderr
    parts = sorted((tmp_path / "out").iterdir())
    assert [tilts(p) for p in parts] == [[-30.0, -15.0], [0.0, 15.0], [30.0]]
    for part in parts:
        mrcfile.validate(str(part))


def test_split_writes_all_outputs_or_none(tmp_path, monkeypatch):
    write_noa(tmp_path / "in.mrc", np.zeros((4, 1, 3, 3), np.float32))
    task = operations.get("split").task()
    calls = []

    def failing(plan, dst, **kwargs):
        calls.append(dst)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(plan, dst, **kwargs)

    real = local.write_plan
    monkeypatch.setattr(local, "write_plan", failing)
    with pytest.raises(OSError):
        local.write_several(task, tmp_path / "in.mrc", tmp_path / "out")
    assert len(calls) == 3 and not (tmp_path / "out").exists()  # the folder it made goes too
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "other.txt").write_text("mine")
    calls.clear()
    with pytest.raises(OSError):
        local.write_several(task, tmp_path / "in.mrc", tmp_path / "kept")
    assert [p.name for p in (tmp_path / "kept").iterdir()] == ["other.txt"]


def test_split_force_replaces_existing_store_outputs_whole(tmp_path):
    """Issue 32 item 3: --force over existing OME-Zarr outputs left old and new mixed with the staging folder
    (os.replace cannot put a folder onto a non-empty one). Every store is replaced whole, and nothing else stays."""
    import zarr

    data = np.random.default_rng(2).normal(size=(10, 1, 4, 5)).astype(np.float32)
    write_noa(tmp_path / "st.mrcs", data)
    assert noa("copy", tmp_path / "st.mrcs", tmp_path / "st.ome.zarr").returncode == 0
    first = noa("split", tmp_path / "st.ome.zarr", "--out-dir", tmp_path / "split", "--every", "5")
    assert first.returncode == 0, first.stderr
    names = sorted(p.name for p in (tmp_path / "split").iterdir())
    assert len(names) == 2 and all(n.endswith(".ome.zarr") for n in names)
    write_noa(tmp_path / "st.mrcs", data * 2, dtype=np.float32)  # new values: the replaced stores must show them
    assert noa("copy", tmp_path / "st.mrcs", tmp_path / "st.ome.zarr", "--force").returncode == 0
    again = noa("split", tmp_path / "st.ome.zarr", "--out-dir", tmp_path / "split", "--every", "5", "--force")
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in (tmp_path / "split").iterdir()) == names  # no staging folder, no leftovers
    for k, name in enumerate(names):
        root = zarr.open_group(str(tmp_path / "split" / name), mode="r")
        np.testing.assert_array_equal(np.asarray(root["0"]).reshape(5, 4, 5), data[5 * k:5 * k + 5, 0] * 2)


@pytest.mark.parametrize("stop_after", [0, 1, 2])
@pytest.mark.parametrize("force", [False, True])
def test_an_interruption_while_outputs_take_their_names_leaves_all_or_none(tmp_path, monkeypatch, stop_after, force):
    """Issue 32 item 4: SIGTERM (raised in the main thread as noa_cli's Terminated, a BaseException) during the
    renames left one output behind. Interrupted after any rename, every output renamed is taken back and every
    output it replaced comes back."""
    from noa_core.io import atomic

    write_noa(tmp_path / "in.mrc", np.arange(3 * 4, dtype=np.float32).reshape(3, 1, 2, 2))
    out = tmp_path / "out"
    out.mkdir()
    if force:  # earlier outputs, to be restored
        for k in range(3):
            (out / f"in_{k:03d}.mrc").write_bytes(f"old {k}".encode())
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = atomic._rename_new if not force else atomic._rename
    count = {"renames": 0}

    def interrupted(*args):
        done = real(*args)
        count["renames"] += 1
        if count["renames"] == stop_after + 1:  # once: the clean-up's own renames are not interrupted
            raise KeyboardInterrupt  # as a signal lands: after the rename, before any bookkeeping
        return done

    monkeypatch.setattr(atomic, "_rename_new" if not force else "_rename", interrupted)
    with pytest.raises(KeyboardInterrupt):
        local.write_several(operations.get("split").task(), tmp_path / "in.mrc", out, overwrite=force)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_split_refuses_existing_outputs_in_one_line(tmp_path):
    write_noa(tmp_path / "in.mrc", np.zeros((3, 1, 2, 2), np.float32))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "in_001.mrc").write_bytes(b"old")
    assert_user_error(noa("split", tmp_path / "in.mrc", "--out-dir", tmp_path / "out"), "in_001.mrc", "exists")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["in_001.mrc"]
    assert (tmp_path / "out" / "in_001.mrc").read_bytes() == b"old"
    done = noa("split", tmp_path / "in.mrc", "--out-dir", tmp_path / "out", "--force")
    assert done.returncode == 0 and len(list((tmp_path / "out").iterdir())) == 3
    refused = noa("split", tmp_path / "in.mrc", "--out-dir", tmp_path / "out2", "--every", "0")  # click's usage error
    assert refused.returncode == 2 and "--every" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "out2").exists()


def test_split_in_memory_matches_the_file_operation():
    data = np.arange(2 * 3 * 4 * 5, dtype=np.int16).reshape(2, 3, 4, 5)
    parts = noa_api.split(data, 1)
    assert [p.shape for p in parts] == [(1, 3, 4, 5)] * 2
    volume = noa_api.split(data[:1], 2)
    assert [p.shape for p in volume] == [(2, 1, 4, 5), (1, 1, 4, 5)]
    np.testing.assert_array_equal(volume[1].numpy()[0, 0], data[0, 2])
    with pytest.raises(ParameterError, match="every"):
        noa_api.split(data, 0)


# -- join --------------------------------------------------------------------------------------------


@SMALL
@given(counts=st.lists(st.integers(1, 4), min_size=1, max_size=4), section=st.tuples(st.integers(1, 2),
       st.integers(1, 6), st.integers(1, 6)), orders=st.lists(st.sampled_from("CF"), min_size=4, max_size=4))
def test_join_is_numpys_concatenate(tmp_path_factory, counts, section, orders):
    folder = tmp_path_factory.mktemp("join")
    rng = np.random.default_rng(1)
    datas = [write_noa(folder / f"{i}.mrc", rng.integers(-99, 99, (n, *section)).astype(np.int16), orders[i])
             for i, n in enumerate(counts)]
    inputs = [folder / f"{i}.mrc" for i in range(len(counts))]
    task = operations.get("join").task(shared=inputs[1:])
    plan = task.plan(inputs[0])
    assert plan.shape == (sum(counts), *section)
    # A tile spanning the inputs' borders reads from each input it covers.
    key = (slice(0, sum(counts)), slice(None), slice(None), slice(None))
    views, _compute = plan.reads(key)
    assert len(views) == len(counts)
    local.write(task, inputs[0], folder / "out.mrc")
    np.testing.assert_array_equal(read(folder / "out.mrc"), np.concatenate(datas))


def test_join_names_the_first_misfit(tmp_path):
    write_noa(tmp_path / "a.mrcs", np.zeros((2, 1, 4, 4), np.float32))
    write_noa(tmp_path / "b.mrcs", np.zeros((1, 1, 4, 4), np.float32))
    write_noa(tmp_path / "c.mrcs", np.zeros((1, 1, 4, 5), np.float32))
    write_noa(tmp_path / "d.mrcs", np.zeros((1, 1, 4, 4), np.int16))
    assert_user_error(noa("join", tmp_path / "a.mrcs", tmp_path / "b.mrcs", tmp_path / "c.mrcs", "-o",
                          tmp_path / "out.mrcs"), "c.mrcs", "(1, 4, 5)")
    assert_user_error(noa("join", tmp_path / "a.mrcs", tmp_path / "d.mrcs", "-o", tmp_path / "out.mrcs"),
                      "d.mrcs", "int16")
    assert not (tmp_path / "out.mrcs").exists()
    with pytest.raises(SectionMismatchError, match="array 1"):
        noa_api.join([np.zeros((1, 2, 2), np.float32), np.zeros((1, 2, 3), np.float32)])


def test_join_concatenates_fei1_records_and_keeps_the_pixel_size(tmp_path):
    fei1_stack(tmp_path / "a.mrcs", 2)
    data, _ = fei1_stack(tmp_path / "b.mrcs", 3)
    done = noa("join", tmp_path / "a.mrcs", tmp_path / "b.mrcs", "-o", tmp_path / "ab.mrcs")
    assert done.returncode == 0, done.stderr
    assert tilts(tmp_path / "ab.mrcs") == [-30.0, 30.0, -30.0, 0.0, 30.0]
    got, _, voxel = mrc_data(tmp_path / "ab.mrcs")
    np.testing.assert_array_equal(got, np.concatenate([data[:2], data]))
    assert float(voxel.x) == pytest.approx(1.25)
    mrcfile.validate(str(tmp_path / "ab.mrcs"))
    write_mrc(tmp_path / "plain.mrcs", np.zeros((1, 4, 6), np.float32), stack=True)
    done = noa("join", tmp_path / "a.mrcs", tmp_path / "plain.mrcs", "-o", tmp_path / "mixed.mrcs")
    assert done.returncode == 0 and "extended header dropped" in done.stderr
    mrcfile.validate(str(tmp_path / "mixed.mrcs"))


def test_split_then_join_gives_the_real_map_back(tmp_path):
    source = need_shared("EMD-3197.map")[0]
    done = noa("split", source, "--out-dir", tmp_path / "z", "--every", "7")
    assert done.returncode == 0, done.stderr
    parts = sorted((tmp_path / "z").iterdir())
    done = noa("join", *parts, "-o", tmp_path / "stack.mrcs")
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(load(tmp_path / "stack.mrcs"), load(source))
    _, _, voxel = mrc_data(tmp_path / "stack.mrcs")
    _, _, expected = mrc_data(source)
    assert (float(voxel.x), float(voxel.y)) == pytest.approx((float(expected.x), float(expected.y)))


# -- percentiles, streamed -------------------------------------------------------------------------------


@SMALL
@given(values=st.lists(st.integers(-300, 300), min_size=1, max_size=200),
       qs=st.lists(st.floats(0, 100), min_size=1, max_size=4), dtype=st.sampled_from(["int16", "int32", "uint16"]))
def test_percentiles_of_integer_data_are_exact(values, qs, dtype):
    data = np.array(values)
    if dtype == "uint16":
        data = np.abs(data)
    data = data.astype(dtype).reshape(1, 1, 1, -1)
    got = statistics.percentiles(asarray(data), qs)
    np.testing.assert_allclose(got, np.percentile(data, qs), rtol=1e-12, atol=1e-9)


@SMALL
@given(values=st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=1, max_size=300),
       qs=st.lists(st.floats(0, 100), min_size=1, max_size=4))
def test_percentiles_of_floats_are_within_one_bin(values, qs):
    data = np.array(values, np.float32).reshape(1, 1, -1, 1)
    got = statistics.percentiles(asarray(data), qs)
    bound = (float(data.max()) - float(data.min())) / statistics.HISTOGRAM_BINS
    np.testing.assert_allclose(got, np.percentile(data.astype(np.float64), qs), rtol=0, atol=bound * 1.0001 + 1e-9)


def test_percentiles_stream_over_tiles_of_a_file(tmp_path, monkeypatch):
    data = np.random.default_rng(2).normal(size=(6, 1, 30, 40)).astype(np.float32)
    write_noa(tmp_path / "in.mrc", data)
    array, _ = noa_io.read(tmp_path / "in.mrc")
    monkeypatch.setattr(statistics, "HISTOGRAM_BLOCK_BYTES", 4096)  # many tiles
    got = statistics.percentiles(array, (0.1, 50, 99.9))
    bound = float(data.max() - data.min()) / statistics.HISTOGRAM_BINS
    np.testing.assert_allclose(got, np.percentile(data, (0.1, 50, 99.9)), atol=bound)
    bad = data.copy()
    bad[2, 0, 3, 3] = np.nan
    write_noa(tmp_path / "nan.mrc", bad)
    with pytest.raises(ValueRangeError, match="NaN"):
        statistics.percentiles(noa_io.read(tmp_path / "nan.mrc")[0], (1, 99))


# -- scale -----------------------------------------------------------------------------------------------


def expected_scale(data, ends, target, dtype):
    a, b = ends
    lo, hi = target
    t = np.clip((data.astype(np.float64) - a) * (hi - lo) / (b - a) + lo, lo, hi)
    return (np.rint(t) if np.dtype(dtype).kind in "iu" else t).astype(dtype)


@SMALL
@given(shape=shapes, order=st.sampled_from("CF"), dtype=st.sampled_from(["int16", "float32", "uint16"]))
def test_scale_from_min_max(tmp_path_factory, shape, order, dtype):
    folder = tmp_path_factory.mktemp("scale")
    data = write_noa(folder / "in.mrc", np.random.default_rng(3).integers(0, 1000, shape).astype(dtype), order)
    if data.min() == data.max():
        data.flat[0] += 1
        write_noa(folder / "in.mrc", data, order)
    local.write(operations.get("scale").task(to_range=(-1, 1)), folder / "in.mrc", folder / "out.mrc")
    got = read(folder / "out.mrc")
    assert got.dtype == np.float32
    if data.size == 1:  # constant data go to the low end
        assert got.reshape(-1).tolist() == [-1.0]
        return
    np.testing.assert_allclose(got, expected_scale(data, (data.min(), data.max()), (-1, 1), "float32"), atol=1e-6)


def test_scale_to_uint8_with_percentiles_clamps_and_rounds(tmp_path):
    data = write_mrc(tmp_path / "in.mrc", np.random.default_rng(4).integers(-2000, 2000, (3, 17, 19)).astype(np.int16))
    done = noa("scale", tmp_path / "in.mrc", tmp_path / "out.mrc", "--to-range", "0,255", "--percentiles", "1,99",
               "--dtype", "uint8")
    assert done.returncode == 0, done.stderr
    ends = tuple(np.percentile(data, (1, 99)))  # exact for 16-bit data
    expected = expected_scale(data, ends, (0, 255), "uint8")
    np.testing.assert_array_equal(load(tmp_path / "out.mrc"), expected)  # stored widened as mode 6
    mrcfile.validate(str(tmp_path / "out.mrc"))
    np.testing.assert_array_equal(noa_api.scale(data, (0, 255), (1, 99), "uint8").numpy().reshape(data.shape),
                                  expected)


def test_scale_refuses_bad_ranges_and_bad_data(tmp_path):
    write_mrc(tmp_path / "in.mrc", np.arange(12, dtype=np.float32).reshape(3, 4))
    out = tmp_path / "out.mrc"
    assert_user_error(noa("scale", tmp_path / "in.mrc", out, "--to-range", "0,300", "--dtype", "uint8"),
                      "--to-range", "uint8")
    assert_user_error(noa("scale", tmp_path / "in.mrc", out, "--to-range", "5,1"), "--to-range", "below")
    assert_user_error(noa("scale", tmp_path / "in.mrc", out, "--to-range", "0,1", "--percentiles", "90,10"),
                      "--percentiles")
    assert_user_error(noa("scale", tmp_path / "in.mrc", out, "--to-range", "0,1", "--percentiles", "1,101"),
                      "--percentiles")
    nan = np.arange(12, dtype=np.float32).reshape(3, 4)
    nan[1, 1] = np.inf
    write_mrc(tmp_path / "inf.mrc", nan)
    assert_user_error(noa("scale", tmp_path / "inf.mrc", out, "--to-range", "0,1"), "inf.mrc", "infinite")
    write_mrc(tmp_path / "c.mrc", np.ones((2, 2), np.complex64))
    assert_user_error(noa("scale", tmp_path / "c.mrc", out, "--to-range", "0,1"), "complex")
    assert not out.exists()


def test_scale_of_constant_data_is_the_low_end():
    got = noa_api.scale(np.full((2, 3), 7, np.int16), (10, 20)).numpy()
    assert (got == 10).all() and got.dtype == np.float32


# -- normalize -----------------------------------------------------------------------------------------


@SMALL
@given(shape=shapes, order=st.sampled_from("CF"), per_section=st.booleans(),
       target=st.tuples(st.floats(-10, 10), st.floats(0.1, 10)))
def test_normalize_matches_numpy(tmp_path_factory, shape, order, per_section, target):
    folder = tmp_path_factory.mktemp("normalize")
    data = write_noa(folder / "in.mrc", np.random.default_rng(5).normal(3, 2, shape).astype(np.float32), order)
    task = operations.get("normalize").task(per_section=per_section, mean=target[0], std=target[1])
    local.write(task, folder / "in.mrc", folder / "out.mrc")
    axes = (2, 3) if per_section else (0, 1, 2, 3)
    x = data.astype(np.float64)
    mean, std = x.mean(axis=axes, keepdims=True), x.std(axis=axes, keepdims=True)
    expected = np.where(std > 0, (x - mean) / np.where(std > 0, std, 1) * target[1] + target[0], target[0])
    got = read(folder / "out.mrc")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4 * max(1, abs(target[0]), target[1]))
    np.testing.assert_allclose(noa_api.normalize(data, per_section, *target).numpy(), got, rtol=1e-5, atol=1e-5)


def test_normalize_per_section_of_the_real_map(tmp_path):
    source = need_shared("EMD-3197.map")[0]
    done = noa("normalize", source, tmp_path / "n.mrc", "--per-section", "--mean", "1", "--std", "2")
    assert done.returncode == 0, done.stderr
    got = load(tmp_path / "n.mrc").astype(np.float64)
    np.testing.assert_allclose(got.mean(axis=(1, 2)), 1, atol=1e-5)
    np.testing.assert_allclose(got.std(axis=(1, 2)), 2, rtol=1e-5)
    mrcfile.validate(str(tmp_path / "n.mrc"))
    assert_user_error(noa("normalize", source, tmp_path / "bad.mrc", "--std", "0"), "--std")
    assert not (tmp_path / "bad.mrc").exists()


def test_in_memory_functions_refuse_as_the_files_do():
    with pytest.raises(DTypeError):
        noa_api.normalize(np.ones(3, np.complex64))
    with pytest.raises(ValueRangeError):
        noa_api.normalize(np.array([1.0, np.nan]))
    with pytest.raises(ParameterError, match="to_range"):
        noa_api.scale(np.ones(3), (0, 1000), dtype="uint8")


# -- HTTP: both modes and a job --------------------------------------------------------------------------


@pytest.fixture
def client(tmp_path, make_client):
    root = tmp_path / "root"
    root.mkdir()
    test_client = make_client(data_root=root)
    test_client.root = root
    return test_client



def test_split_over_http_paths_upload_and_jobs(client):
    root = client.root
    data = write_mrc(root / "st.mrcs", np.arange(5 * 4 * 6, dtype=np.float32).reshape(5, 4, 6), stack=True)
    schema = client.get("/openapi.json").json()
    assert "application/zip" in schema["paths"]["/v1/upload/split"]["post"]["responses"]["200"]["content"]
    written = client.post("/v1/paths/split", json={"src": "st.mrcs", "dst": "parts", "every": 2})
    assert written.status_code == 201, written.text
    assert written.json()["outputs"] == ["parts/st_000.mrcs", "parts/st_001.mrcs", "parts/st_002.mrcs"]
    np.testing.assert_array_equal(load(root / "parts" / "st_002.mrcs").reshape(-1, 4, 6), data[4:])
    assert_problem(client.post("/v1/paths/split", json={"src": "st.mrcs", "dst": "parts", "every": 2}), 409,
                   "output-exists")
    assert_problem(client.post("/v1/paths/split", json={"src": "st.mrcs", "dst": "../x"}), 403)
    sent = client.post("/v1/upload/split", data={"every": "3"},
                       files={"file": ("st.mrcs", (root / "st.mrcs").read_bytes())})
    assert sent.status_code == 200, sent.text
    assert sent.headers["content-type"] == "application/zip"
    assert sent.headers["content-disposition"] == 'attachment; filename="st_split.zip"'
    packed = zipfile.ZipFile(io.BytesIO(sent.content))
    assert packed.namelist() == ["st_000.mrcs", "st_001.mrcs"]
    np.testing.assert_array_equal(load(_extract(packed, "st_001.mrcs", root)).reshape(-1, 4, 6), data[3:])
    job = client.post("/v1/jobs", json={"operation": "split", "src": "st.mrcs", "dst": "job"})
    assert job.status_code == 202, job.text
    state = wait_job(client, job.headers["location"], 60)
    assert state["status"] == "succeeded" and len(state["result"]["outputs"]) == 5


def _extract(packed: zipfile.ZipFile, name: str, folder: Path) -> Path:
    path = folder / f"extracted-{name}"
    path.write_bytes(packed.read(name))
    return path


def test_join_scale_normalize_over_http(client):
    root = client.root
    a = write_mrc(root / "a.mrcs", np.arange(2 * 3 * 4, dtype=np.int16).reshape(2, 3, 4), stack=True)
    b = write_mrc(root / "b.mrcs", -np.arange(3 * 4, dtype=np.int16).reshape(1, 3, 4), stack=True)
    joined = client.post("/v1/paths/join", json={"srcs": ["a.mrcs", "b.mrcs"], "dst": "ab.mrcs"})
    assert joined.status_code == 201, joined.text
    np.testing.assert_array_equal(load(root / "ab.mrcs"), np.concatenate([a, b]))
    misfit = write_mrc(root / "c.mrcs", np.zeros((1, 3, 5), np.int16), stack=True)
    assert misfit.shape
    body = assert_problem(client.post("/v1/paths/join", json={"srcs": ["a.mrcs", "c.mrcs"], "dst": "x.mrcs"}), 422)
    assert "c.mrcs" in body["detail"] and not (root / "x.mrcs").exists()
    sent = client.post("/v1/upload/join", files=[("files", ("a.mrcs", (root / "a.mrcs").read_bytes())),
                                                 ("files", ("b.mrcs", (root / "b.mrcs").read_bytes()))])
    assert sent.status_code == 200, sent.text
    (root / "up.mrcs").write_bytes(sent.content)
    np.testing.assert_array_equal(load(root / "up.mrcs"), np.concatenate([a, b]))
    scaled = client.post("/v1/upload/scale", data={"to_range": ["0", "255"], "dtype": "uint8"},
                         files={"file": ("a.mrcs", (root / "a.mrcs").read_bytes())})
    assert scaled.status_code == 200, scaled.text
    (root / "s.mrcs").write_bytes(scaled.content)
    np.testing.assert_array_equal(load(root / "s.mrcs"), expected_scale(a, (a.min(), a.max()), (0, 255), "uint8"))
    bad = client.post("/v1/paths/scale", json={"src": "a.mrcs", "dst": "bad.mrcs", "to_range": [0, 1000],
                                               "dtype": "uint8"})
    assert_problem(bad, 400, "invalid-parameter")
    job = client.post("/v1/jobs", json={"operation": "normalize", "src": "a.mrcs", "dst": "n.mrcs",
                                        "per_section": True})
    state = wait_job(client, job.headers["location"], 60)
    assert state["status"] == "succeeded", state
    got = load(root / "n.mrcs").astype(np.float64)
    np.testing.assert_allclose(got.mean(axis=(1, 2)), 0, atol=1e-6)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "float16", "float32"])
def test_scale_and_normalize_read_every_mrc_mode(tmp_path, dtype):
    values = (np.arange(2 * 5 * 7) * 37 % 101).reshape(2, 5, 7)
    data = write_mrc(tmp_path / "in.mrcs", values.astype(dtype), stack=True, voxel_size=(2.0, 2.0, 1.0))
    assert noa("scale", tmp_path / "in.mrcs", tmp_path / "s.mrcs", "--to-range", "-1,1").returncode == 0
    expected = expected_scale(data, (float(data.min()), float(data.max())), (-1, 1), "float32")
    np.testing.assert_allclose(load(tmp_path / "s.mrcs"), expected, atol=1e-6)
    assert noa("normalize", tmp_path / "in.mrcs", tmp_path / "n.mrcs").returncode == 0
    x = data.astype(np.float64)
    np.testing.assert_allclose(load(tmp_path / "n.mrcs"), (x - x.mean()) / x.std(), rtol=1e-5, atol=1e-5)
    for out in ("s.mrcs", "n.mrcs"):
        _, header, voxel = mrc_data(tmp_path / out)
        assert (float(voxel.x), float(voxel.y)) == (2.0, 2.0) and int(header.mode) == 2
        mrcfile.validate(str(tmp_path / out))


def test_scale_of_a_real_tiff_uses_exact_percentiles(tmp_path):
    import tifffile

    source = need_shared("zyx_uint16.tiff")[0]
    done = noa("scale", source, tmp_path / "s.tif", "--to-range", "0,255", "--percentiles", "2,98", "--dtype",
               "uint8")
    assert done.returncode == 0, done.stderr
    data = tifffile.imread(source)
    expected = expected_scale(data, tuple(np.percentile(data, (2, 98))), (0, 255), "uint8")
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "s.tif").reshape(expected.shape), expected)


def test_scale_keeps_the_extended_header_and_labels(tmp_path):
    fei1_stack(tmp_path / "tilts.mrcs", 4)
    done = noa("normalize", tmp_path / "tilts.mrcs", tmp_path / "n.mrcs", "--per-section")
    assert done.returncode == 0, done.stderr
    assert tilts(tmp_path / "n.mrcs") == tilts(tmp_path / "tilts.mrcs")
    _, header, _ = mrc_data(tmp_path / "n.mrcs")
    labels = [bytes(label).decode().strip() for label in header.label[:int(header.nlabl)]]
    assert labels[0].startswith("Created by mrcfile") and "noa normalize --per-section" in labels[-1]


def test_a_volumes_z_sections_keep_their_place(tmp_path):
    """IMOD's convention, as noa sections: section k lies at k * pixel - origin."""
    data = np.arange(5 * 3 * 4, dtype=np.float32).reshape(5, 3, 4)
    with mrcfile.new(tmp_path / "vol.mrc", data) as f:
        f.voxel_size = (1.5, 2.0, 2.5)  # x, y, z
        f.header.origin = (10.0, 20.0, 30.0)
    done = noa("split", tmp_path / "vol.mrc", "--out-dir", tmp_path / "z", "--every", "2")
    assert done.returncode == 0, done.stderr
    for k, part in enumerate(sorted((tmp_path / "z").iterdir())):
        got, header, voxel = mrc_data(part)
        np.testing.assert_array_equal(got.reshape(-1, 3, 4), data[2 * k:2 * k + 2])
        assert int(header.ispg) == 0  # an image stack of the sections
        assert (float(header.origin.x), float(header.origin.y)) == (10.0, 20.0)
        assert float(header.origin.z) == pytest.approx(30.0 - 2 * k * 2.5)
        assert (float(voxel.x), float(voxel.y)) == pytest.approx((1.5, 2.0))
