"""The stack operations as files (resize, bin, flip, rotx, sections, average): plans and results through the
local driver, tile by tile and in split tasks, against NumPy on data written and read back by mrcfile and
tifffile; headers (pixel size, origin, FEI1 records) against mrcfile; the CLI, both HTTP modes and jobs.
"""

from __future__ import annotations

import os

import mrcfile
import numpy as np
import pytest
import tifffile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import (
    PROBLEM,
    assert_problem,
    assert_user_error,
    fei1_stack,
    load,
    need_shared,
    noa,
    random_values,
    start_server,
    wait_job,
)
from noa_core import io, operations
from noa_core.compute.moments import RunningStatistics
from noa_core.errors import ParameterError, ShapeError
from noa_core.run import local

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
volume_shapes = st.tuples(st.integers(1, 2), st.integers(2, 5), st.integers(1, 6), st.integers(1, 6))
shapes = st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 6), st.integers(1, 6))
MODES = {"int8": 0, "int16": 1, "float32": 2, "complex64": 4, "uint16": 6, "float16": 12}


def values(shape, dtype="float32", seed=1) -> np.ndarray:
    return random_values(shape, dtype, seed, span=100, mean=2, sd=5)


def write_bdhw(path, data: np.ndarray, order: str = "C", voxel=(1.5, 2.0, 2.5), origin=(3.0, -4.0, 5.0)):
    """A BDHW array in an MRC file, C order by mrcfile, or F order (sections column-major) by noa; voxel
    size (x, y, z) and origin (x, y, z) set as other software sets them."""
    b, d, h, w = data.shape
    if order == "F":
        from noa_core.array import asarray

        meta = io.Metadata("mrc", data.shape, data.dtype.name, pixel_size=voxel[::-1], origin=origin[::-1])
        io.write(path, asarray(data), meta, order="F", overwrite=True)
        return
    stored = data.reshape(b * d, h, w) if b > 1 and d == 1 else data.reshape(d, h, w) if b == 1 else data
    with mrcfile.new(path, stored, overwrite=True) as f:
        if b > 1 and d == 1:
            f.set_image_stack()
        f.voxel_size = voxel
        f.header.origin = origin


def read_bdhw(path, shape) -> tuple[np.ndarray, np.recarray, np.recarray]:
    """Data (as BDHW, undoing a recorded column-major mapping), header and voxel size, by mrcfile."""
    with mrcfile.open(path, permissive=True) as f:
        data = np.array(f.data)
        if int(f.header.mapc) == 2:
            data = np.swapaxes(data, -1, -2)
        return data.reshape(shape), f.header.copy(), f.voxel_size.copy()


def run(tmp_path, name, data, order="C", suffix=".mrc", **options):
    src, dst = tmp_path / "in.mrc", tmp_path / f"out{suffix}"
    write_bdhw(src, data, order)
    plan = operations.get(name).task(options).plan(src)
    local.write_plan(plan, dst, overwrite=True)
    return plan, dst


# -- each operation against NumPy, its header against mrcfile --------------------------------------------------


@SETTINGS
@given(shape=shapes, size=st.tuples(st.integers(1, 7), st.integers(1, 7)), order=st.sampled_from("CF"))
def test_resize_plan_and_result(tmp_path, shape, size, order):
    data = values(shape)
    plan, out = run(tmp_path, "resize", data, order, shape=size, fill="zero")
    target = (*shape[:2], *size)
    assert plan.shape == target and plan.input_shapes == [shape] and plan.reads is not None
    got, header, voxel = read_bdhw(out, target)
    offsets = [n // 2 - m // 2 for n, m in zip(shape, target)]
    pads = [(max(-o, 0), m - min(o + m, n) + max(o, 0) - max(-o, 0)) for n, m, o in zip(shape, target, offsets)]
    crops = tuple(slice(max(o, 0), min(o + m, n)) for n, m, o in zip(shape, target, offsets))
    np.testing.assert_array_equal(got, np.pad(data[crops], pads))
    # IMOD's origin: content stays put, so the origin moves by -offset * pixel (x: 1.5 A, y: 2.0 A)
    assert float(header.origin.x) == pytest.approx(3.0 - offsets[3] * 1.5)
    assert float(header.origin.y) == pytest.approx(-4.0 - offsets[2] * 2.0)
    assert (float(voxel.x), float(voxel.y)) == pytest.approx((1.5, 2.0))
    assert mrcfile.validate(str(out))


def test_resize_fills_with_the_mean_of_the_input(tmp_path):
    data = values((1, 3, 4, 5))
    _, out = run(tmp_path, "resize", data, shape=(5, 6, 7))
    got, header, _ = read_bdhw(out, (1, 5, 6, 7))
    mean = np.float32(data.astype(np.float64).mean())
    np.testing.assert_allclose(got, np.pad(data, ((0, 0), (1, 1), (1, 1), (1, 1)), constant_values=mean), rtol=1e-6)
    assert float(header.origin.z) == pytest.approx(5.0 + 1 * 2.5)


@SETTINGS
@given(shape=volume_shapes, k=st.integers(1, 3), depth=st.booleans(), order=st.sampled_from("CF"))
def test_bin_plan_and_result(tmp_path, shape, k, depth, order):
    shape = tuple(max(n, k) if i >= (1 if depth else 2) else n for i, n in enumerate(shape))
    data = values(shape)
    plan, out = run(tmp_path, "bin", data, order, factor=k, depth=depth)
    kd = k if depth else 1
    b, d, h, w = shape
    starts = ((d % kd) // 2, (h % k) // 2, (w % k) // 2)
    n = (d // kd, h // k, w // k)
    box = data[:, starts[0]:starts[0] + n[0] * kd, starts[1]:starts[1] + n[1] * k, starts[2]:starts[2] + n[2] * k]
    expected = box.astype(np.float64).reshape(b, n[0], kd, n[1], k, n[2], k).mean(axis=(2, 4, 6))
    assert plan.shape == (b, *n) and plan.read_factor == kd * k * k
    got, header, voxel = read_bdhw(out, plan.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert (float(voxel.x), float(voxel.y)) == pytest.approx((1.5 * k, 2.0 * k))
    if n[0] > 1:
        assert float(voxel.z) == pytest.approx(2.5 * kd)
    assert float(header.origin.x) == pytest.approx(3.0 - starts[2] * 1.5)


@SETTINGS
@given(shape=volume_shapes, axis=st.sampled_from("xyz"), order=st.sampled_from("CF"))
def test_flip_plan_and_result(tmp_path, shape, axis, order):
    data = values(shape)
    _plan, out = run(tmp_path, "flip", data, order, axis=axis)
    got, header, voxel = read_bdhw(out, shape)
    np.testing.assert_array_equal(got, np.flip(data, {"x": 3, "y": 2, "z": 1}[axis]))
    assert float(header.origin.x) == pytest.approx(3.0) and float(voxel.z) == pytest.approx(2.5)


@SETTINGS
@given(shape=volume_shapes, order=st.sampled_from("CF"))
def test_rotx_plan_and_result(tmp_path, shape, order):
    data = values(shape)
    plan, out = run(tmp_path, "rotx", data, order)
    b, d, h, w = shape
    assert plan.shape == (b, h, d, w)
    got, header, voxel = read_bdhw(out, plan.shape)
    np.testing.assert_array_equal(got, np.stack([np.rot90(v, 1, axes=(0, 1)) for v in data]))
    # pixel sizes follow their axes; origin as IMOD's clip rotx sets it: y' = z_origin, z' = ny * py - y_origin
    assert (float(voxel.y), float(voxel.z)) == pytest.approx((2.5, 2.0))
    assert float(header.origin.y) == pytest.approx(5.0)
    assert float(header.origin.z) == pytest.approx(h * 2.0 + 4.0)
    assert float(header.origin.x) == pytest.approx(3.0)


@SETTINGS
@given(shape=shapes, order=st.sampled_from("CF"), data=st.data())
def test_sections_plan_and_result(tmp_path, shape, order, data):
    array = values(shape)
    axis = 0 if shape[0] > 1 else 1
    keep = data.draw(st.lists(st.integers(0, shape[axis] - 1), min_size=1, max_size=5))
    plan, out = run(tmp_path, "sections", array, order, keep=",".join(map(str, keep)))
    got, header, _ = read_bdhw(out, plan.shape)
    np.testing.assert_array_equal(got, np.take(array, keep, axis=axis))
    if axis == 1:  # depth slices: the first kept one is the new first section
        assert float(header.origin.z) == pytest.approx(5.0 - keep[0] * 2.5)


@SETTINGS
@given(shape=shapes, group=st.integers(1, 3), total=st.booleans(), order=st.sampled_from("CF"))
def test_average_plan_and_result(tmp_path, shape, group, total, order):
    axis = 0 if shape[0] > 1 else 1
    if group > shape[axis]:
        return
    array = values(shape, "int16")
    plan, out = run(tmp_path, "average", array, order, group=group, sum=total)
    n = shape[axis] // group
    grouped = np.take(array, range(n * group), axis=axis).astype(np.float64)
    grouped = grouped.reshape(shape[:axis] + (n, group) + shape[axis + 1:])
    expected = grouped.sum(axis=axis + 1) if total else grouped.mean(axis=axis + 1)
    got, header, voxel = read_bdhw(out, plan.shape)
    assert got.dtype == np.float32 and int(header.mode) == 2
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    if axis == 1 and n > 1:
        assert float(voxel.z) == pytest.approx(2.5 * group)


@pytest.mark.parametrize("dtype", list(MODES))
@pytest.mark.parametrize("name, options", [("resize", {"shape": (5, 3), "fill": "zero"}), ("bin", {"factor": 2}),
                                           ("flip", {"axis": "y"}), ("rotx", {}), ("sections", {"keep": "2,0"}),
                                           ("average", {"group": 2})])
def test_every_mrc_mode(tmp_path, dtype, name, options):
    data = values((1, 3, 4, 6), dtype)
    src, dst = tmp_path / "in.mrc", tmp_path / "out.mrc"
    with mrcfile.new(src, data[0]) as f:
        f.voxel_size = 1.0
        assert int(f.header.mode) == MODES[dtype]
    local.write(operations.get(name).task(options), src, dst)
    with mrcfile.open(dst) as f:
        got, mode = np.array(f.data), int(f.header.mode)
    import noa_core as noa

    expected = getattr(noa, "bin_voxels" if name == "bin" else name)(data, **{k: v for k, v in options.items()}).numpy()
    if name == "average":
        assert mode == (4 if dtype == "complex64" else 2)
    else:
        assert mode == MODES[dtype]
    np.testing.assert_array_equal(got.reshape(expected.shape), expected)
    assert mrcfile.validate(str(dst))


def test_uint8_is_kept_as_values_and_bin_rounds_integers(tmp_path):
    data = np.array([[[0, 1, 2, 3], [255, 254, 1, 1]]], np.uint8)  # (1, 2, 4): means 127.5 -> 128, 2.5 -> 2, 1.75
    tifffile.imwrite(tmp_path / "in.tif", data[0])
    local.write(operations.get("bin").task(factor=2), tmp_path / "in.tif", tmp_path / "out.tif")
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "out.tif"), [[128, 2]])


# -- streaming: many tiles, bounded reads, split tasks ---------------------------------------------------------


@pytest.mark.parametrize("name, options", [("resize", {"shape": (300, 200), "fill": "mean"}),
                                           ("bin", {"factor": 2}), ("bin", {"factor": 2, "depth": True}),
                                           ("flip", {"axis": "z"}),
                                           ("flip", {"axis": "y"}), ("rotx", {}),
                                           ("sections", {"keep": "9,0-4,7,12-23"}),
                                           ("average", {"group": 2})])
@pytest.mark.parametrize("split", [False, True])
def test_many_tiles_give_the_whole_result(tmp_path, name, options, split):
    """A 5-30 MB volume in tiles of at most 2 MiB (several tiles): the same values as the in-memory function,
    locally and as split tasks fill it (two runs of tiles from another 'process', statistics merged)."""
    import noa_core as noa

    # a binning writes K**2 (K**3) times less than it reads: its input is larger, for several output tiles
    shape = (1, 24, 256, 210) if name != "bin" else (1, 24, 600, 500) if options.get("depth") else (1, 12, 512, 450)
    data = values(shape)
    src, dst = tmp_path / "in.mrc", tmp_path / "out.mrc"
    write_bdhw(src, data)
    plan = operations.get(name).task(options).plan(src)
    with plan.create(dst, overwrite=True) as writer:
        keys = plan.keys(writer, 2 << 20)
        assert len(keys) > 1
        if not split:
            io.fill(writer, plan.sources, None, reads=plan.tile_reads(), keys=keys)
        else:
            stats = RunningStatistics()
            for part in (keys[: len(keys) // 2], keys[len(keys) // 2:]):
                for tile in writer.region().fill(plan.tile_reads(), part):
                    stats.merge(tile)
            writer.complete(stats)
    expected = getattr(noa, "bin_voxels" if name == "bin" else name)(data, **options).numpy()
    got, header, _ = read_bdhw(dst, expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert float(header.dmean) == pytest.approx(float(expected.astype(np.float64).mean()), rel=1e-4, abs=1e-5)


# -- extended headers: FEI1 records follow the sections ------------------------------------------------------


@pytest.mark.parametrize("name, options, picks", [("sections", {"keep": "4,0-1"}, [4, 0, 1]),
                                                  ("sections", {"drop": "1-3"}, [0, 4, 5]),
                                                  ("average", {"group": 4}, [0]),
                                                  ("resize", {"shape": (4, 1, 4, 6)}, [1, 2, 3, 4]),
                                                  ("flip", {"axis": "x"}, [0, 1, 2, 3, 4, 5]),
                                                  ("bin", {"factor": 2}, [0, 1, 2, 3, 4, 5])])
def test_fei1_records_follow_the_sections(tmp_path, name, options, picks):
    src, dst = tmp_path / "tilts.mrcs", tmp_path / "out.mrcs"
    _, records = fei1_stack(src, 6)
    local.write(operations.get(name).task(options), src, dst)
    with mrcfile.open(dst) as f:
        assert bytes(f.header.exttyp) == b"FEI1"
        indexed = f.indexed_extended_header
        np.testing.assert_array_equal(indexed["Alpha tilt"], records["Alpha tilt"][picks])
        scale = options.get("factor", 1)
        np.testing.assert_allclose(indexed["Pixel size X"], records["Pixel size X"][picks] * scale)
    assert mrcfile.validate(str(dst))


def test_fei1_records_are_dropped_with_a_notice_when_sections_are_new(tmp_path):
    src, dst = tmp_path / "tilts.mrcs", tmp_path / "out.mrcs"
    fei1_stack(src, 6)
    notices = local.write(operations.get("resize").task(shape=(8, 4, 6)), src, dst)
    assert any("extended header dropped" in n and "new sections" in n for n in notices), notices
    with mrcfile.open(dst) as f:
        assert int(f.header.nsymbt) == 0


# -- real files written by other software --------------------------------------------------------------------


def test_real_map_through_every_volume_operation(tmp_path):
    (emd,) = need_shared("EMD-3197.map")
    with mrcfile.open(emd) as f:
        data, voxel = np.array(f.data), f.voxel_size.copy()
    for name, options, expected in (
            ("resize", {"shape": (16, 24, 25), "fill": "zero"},
             np.pad(data[2:18], ((0, 0), (2, 2), (2, 3)))),
            ("bin", {"factor": 2, "depth": True}, data.reshape(10, 2, 10, 2, 10, 2).mean(axis=(1, 3, 5))),
            ("flip", {"axis": "z"}, data[::-1]), ("rotx", {}, np.rot90(data, 1, axes=(0, 1))),
            ("sections", {"drop": "0-9"}, data[10:]), ("average", {"group": 5}, data.reshape(4, 5, 20, 20).mean(1))):
        out = tmp_path / f"{name}.mrc"
        local.write(operations.get(name).task(options), emd, out)
        got, _header, got_voxel = read_bdhw(out, (1, *expected.shape))
        np.testing.assert_allclose(got[0], expected, rtol=1e-5, atol=1e-6)
        assert float(got_voxel.x) == pytest.approx(float(voxel.x) * (2 if name == "bin" else 1), rel=1e-5)
        assert mrcfile.validate(str(out))


def test_real_tiffs(tmp_path):
    zyx, tiff16 = need_shared("float32_10z_32y_40x.tiff", "zyx_uint16.tiff")
    data = tifffile.imread(zyx)
    local.write(operations.get("sections").task(keep="9,0"), zyx, tmp_path / "s.tif")
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "s.tif"), data[[9, 0]])
    local.write(operations.get("average").task(group=5, sum=True), zyx, tmp_path / "a.mrc")
    np.testing.assert_allclose(load(tmp_path / "a.mrc"), data.reshape(2, 5, 32, 40).sum(axis=1), rtol=1e-5)
    local.write(operations.get("bin").task(factor=2), zyx, tmp_path / "b.tif")
    np.testing.assert_allclose(tifffile.imread(tmp_path / "b.tif"), data.reshape(10, 16, 2, 20, 2).mean(axis=(2, 4)),
                               rtol=1e-6)
    other = tifffile.imread(tiff16)
    local.write(operations.get("flip").task(axis="x"), tiff16, tmp_path / "f.mrc")
    np.testing.assert_array_equal(load(tmp_path / "f.mrc").reshape(other.shape), other[..., ::-1])


# -- bad input: refused in one line, before any output ---------------------------------------------------------


def test_plans_refuse_with_specific_errors(tmp_path):
    write_bdhw(tmp_path / "stack.mrcs", values((4, 1, 6, 6)))
    for name, options, error, words in (
            ("rotx", {}, ShapeError, r"rotx needs volumes.*\(4, 1, 6, 6\) is a stack of images"),
            ("bin", {"factor": 2, "depth": True}, ShapeError, r"\(4, 1, 6, 6\) is a stack of images"),
            ("flip", {"axis": "z"}, ShapeError, r"\(4, 1, 6, 6\)"),
            ("sections", {"keep": "0-4"}, ParameterError, r"keep: section 4 \(in '0-4'\) is outside 0..3"),
            ("sections", {}, ParameterError, "either keep or drop"),
            ("average", {"group": 5}, ParameterError, r"group: 5 is more than the 4 sections"),
            ("resize", {"shape": (4, 4), "fill": "lots"}, ParameterError, "fill: 'lots' is not mean, zero or a number"),
            ("bin", {"factor": 7}, ShapeError, "fewer than one bin")):
        with pytest.raises(error, match=words):
            operations.get(name).task(options).plan(tmp_path / "stack.mrcs")


def test_the_cli_runs_each_command_and_refuses_in_one_line(tmp_path):
    src = tmp_path / "stack.mrcs"
    write_bdhw(src, values((4, 1, 6, 6)))
    ok = noa("sections", src, tmp_path / "kept.mrcs", "--keep", "3,1")
    assert ok.returncode == 0, ok.stderr
    np.testing.assert_array_equal(load(tmp_path / "kept.mrcs"), load(src)[[3, 1]])
    for args, words in ((["rotx"], ["rotx needs volumes", "(4, 1, 6, 6)"]),
                        (["bin", "--factor", "2", "--depth"], ["stack of images"]),
                        (["sections", "--drop", "0-9"], ["--drop", "outside 0..3"]),
                        (["sections", "--keep", "2-x"], ["--keep", "'2-x'"]),
                        (["average", "--group", "5"], ["--group", "more than the 4 sections"]),
                        (["resize", "--shape", "4,4", "--fill", "1e400"], ["--fill"]),
                        # finite but beyond float32 (issue 32 item 6: it padded with inf)
                        (["resize", "--shape", "8,8", "--fill", "1e300"], ["--fill", "float32", "3.403e+38"])):
        out = tmp_path / "bad.mrcs"
        assert_user_error(noa(args[0], src, out, *args[1:]), *words)
        assert not out.exists() and not list(tmp_path.glob(".bad*"))
    for args in (["average", "--group", "0"], ["resize", "--shape", "4"], ["flip", "--axis", "w"]):
        refused = noa(args[0], src, tmp_path / "bad.mrcs", *args[1:])  # the declared bounds, checked by the CLI
        assert refused.returncode == 2 and args[1] in refused.stderr and "Traceback" not in refused.stderr
        assert not (tmp_path / "bad.mrcs").exists()


def test_http_uploads_paths_and_jobs(tmp_path):
    from fastapi.testclient import TestClient

    from noa_server.app import create_app
    from noa_server.settings import Settings

    root = tmp_path / "root"
    root.mkdir()
    write_bdhw(root / "vol.mrc", values((1, 4, 6, 8)))
    data = load(root / "vol.mrc")
    cases = (("resize", {"shape": [2, 3, 4], "fill": "zero"}, data[1:3, 2:5, 2:6]),
             ("bin", {"factor": 2}, data.reshape(4, 3, 2, 4, 2).mean(axis=(2, 4))),
             ("flip", {"axis": "z"}, data[::-1]), ("rotx", {}, np.rot90(data, 1, axes=(0, 1))),
             ("sections", {"keep": "3,0"}, data[[3, 0]]), ("average", {"group": 2}, data.reshape(2, 2, 6, 8).mean(1)))
    with TestClient(create_app(Settings(warmup=False, data_root=root))) as client:
        for name, params, expected in cases:
            form = {k: [str(x) for x in v] if isinstance(v, list) else str(v).lower() if isinstance(v, bool) else str(v)
                    for k, v in params.items()}
            uploaded = client.post(f"/v1/upload/{name}", data=form,
                                   files={"file": ("vol.mrc", (root / "vol.mrc").read_bytes())})
            assert uploaded.status_code == 200, uploaded.text
            (tmp_path / "up.mrc").write_bytes(uploaded.content)
            np.testing.assert_allclose(load(tmp_path / "up.mrc"), expected, rtol=1e-6)
            written = client.post(f"/v1/paths/{name}", json={"src": "vol.mrc", "dst": f"{name}.mrc", **params})
            assert written.status_code == 201, written.text
            np.testing.assert_allclose(load(root / f"{name}.mrc"), expected, rtol=1e-6)
            job = client.post("/v1/jobs",
                              json={"operation": name, "src": "vol.mrc", "dst": f"job-{name}.mrc", **params})
            assert job.status_code == 202, job.text
            state = wait_job(client, job.headers["location"], 60)
            assert state["status"] == "succeeded", state
            np.testing.assert_allclose(load(root / f"job-{name}.mrc"), expected, rtol=1e-6)
        write_bdhw(root / "stack.mrcs", values((3, 1, 4, 4)))
        for name, params, status in (("rotx", {}, 422), ("sections", {"keep": "0-7"}, 400),
                                     ("average", {"group": 9}, 400), ("flip", {"axis": "q"}, 400)):
            refused = client.post(f"/v1/paths/{name}", json={"src": "stack.mrcs", "dst": "bad.mrcs", **params})
            body = assert_problem(refused, status)
            assert "bad.mrcs" not in os.listdir(root), body
        refused = client.post("/v1/upload/rotx", files={"file": ("stack.mrcs", (root / "stack.mrcs").read_bytes())})
        assert "(3, 1, 4, 4)" in assert_problem(refused, 422)["detail"]


def test_live_service_runs_a_stack_operation(tmp_path):
    """One real `noa serve` (uvicorn) process: an upload and a job of the group, compared with the CLI."""
    import httpx

    root = tmp_path / "root"
    root.mkdir()
    write_bdhw(root / "vol.mrc", values((1, 6, 10, 12)))
    proc, url = start_server(root, tmp_path / "server.log", {"NOA_API_KEY": "k", "NOA_TMP_DIR": str(tmp_path)})
    try:
        assert noa("bin", root / "vol.mrc", tmp_path / "cli.mrc", "--factor", "2", "--depth").returncode == 0
        with httpx.Client(base_url=url, headers={"X-API-Key": "k"}, timeout=60) as client:
            up = client.post("/v1/upload/bin", data={"factor": "2", "depth": "true"},
                             files={"file": ("vol.mrc", (root / "vol.mrc").read_bytes())})
            assert up.status_code == 200, up.text
            (tmp_path / "up.mrc").write_bytes(up.content)
            np.testing.assert_array_equal(load(tmp_path / "up.mrc"), load(tmp_path / "cli.mrc"))
            job = client.post("/v1/jobs", json={"operation": "rotx", "src": "vol.mrc", "dst": "rot.mrc"})
            assert job.status_code == 202, job.text
            state = wait_job(client, job.headers["location"], 300)
            assert state["status"] == "succeeded", state
            np.testing.assert_array_equal(load(root / "rot.mrc"), np.rot90(load(root / "vol.mrc"), 1, axes=(0, 1)))
            refused = client.post("/v1/paths/rotx", json={"src": "vol.mrc", "dst": "x.mrc", "as_stack": True})
            assert refused.status_code == 422 and refused.headers["content-type"].startswith(PROBLEM)
    finally:
        proc.terminate()
        proc.wait(30)


def test_seri_records_follow_the_sections_when_their_size_is_known(tmp_path):
    """SerialEM blocks: one record of nint bytes per section; noa tells the size from the block when it
    divides evenly among the sections, and drops the block (with a notice) when it does not."""
    src, dst = tmp_path / "tilts.mrcs", tmp_path / "out.mrcs"
    data = np.arange(5 * 3 * 4, dtype=np.int16).reshape(5, 3, 4)
    records = np.arange(5 * 32, dtype=np.uint8).reshape(5, 32)
    with mrcfile.new(src, data) as f:
        f.set_image_stack()
        f.set_extended_header(records.reshape(-1))
        f.header.exttyp = b"SERI"
    local.write(operations.get("sections").task(drop="1,3"), src, dst)
    with mrcfile.open(dst) as f:
        assert bytes(f.header.exttyp) == b"SERI"
        assert f.extended_header.tobytes() == records[[0, 2, 4]].tobytes()
        np.testing.assert_array_equal(np.array(f.data), data[[0, 2, 4]])
    with mrcfile.new(src, data, overwrite=True) as f:  # 161 bytes: no whole record per section
        f.set_image_stack()
        f.set_extended_header(np.zeros(161, np.uint8))
        f.header.exttyp = b"SERI"
    notices = local.write(operations.get("sections").task(keep="0"), src, dst, overwrite=True)
    assert any("extended header dropped" in n and "cannot be told apart" in n for n in notices), notices


def test_imod_unsigned_bytes_keep_their_values(tmp_path):
    """IMOD's unsigned mode 0 (stamp, signed flag clear) in, values 0..255 out (stored widened, mode 6)."""
    data = np.arange(2 * 4 * 6, dtype=np.uint8).reshape(2, 4, 6) * 5
    tifffile.imwrite(tmp_path / "in.tif", data)
    local.write(operations.get("copy").task(uint8_mode="imod"), tmp_path / "in.tif", tmp_path / "imod.mrc")
    with mrcfile.open(tmp_path / "imod.mrc", permissive=True) as f:
        assert int(f.header.mode) == 0
    local.write(operations.get("flip").task(axis="x"), tmp_path / "imod.mrc", tmp_path / "out.mrc")
    with mrcfile.open(tmp_path / "out.mrc") as f:
        assert int(f.header.mode) == 6
        np.testing.assert_array_equal(np.array(f.data), data[..., ::-1].astype(np.uint16))


@pytest.mark.parametrize("name, options, picks", [("flip", {"axis": "z"}, [5, 4, 3, 2, 1, 0]),
                                                  ("bin", {"factor": 2, "depth": True}, [0, 2, 4]),
                                                  ("average", {"group": 3}, [0, 3])])
def test_fei1_records_of_a_volume_follow_its_depth(tmp_path, name, options, picks):
    src, dst = tmp_path / "vol.mrc", tmp_path / "out.mrc"
    _, records = fei1_stack(src, 6)
    with mrcfile.open(src, mode="r+") as f:
        f.set_volume()
    local.write(operations.get(name).task(options), src, dst)
    with mrcfile.open(dst) as f:
        assert bytes(f.header.exttyp) == b"FEI1" and f.header.ispg == 1
        np.testing.assert_array_equal(f.indexed_extended_header["Alpha tilt"], records["Alpha tilt"][picks])


def test_bin_and_average_tell_what_they_leave_out(tmp_path):
    """A remainder cropped by bin and sections left out by average reach the user (CLI note lines)."""
    mrcfile.new(tmp_path / "odd.mrc", np.ones((5, 9, 9), np.float32)).close()
    notices = local.write(operations.get("bin").task(factor=2), tmp_path / "odd.mrc", tmp_path / "b.mrc")
    assert notices == ["bin --factor 2: height 1, width 1 pixel(s) left over, cropped evenly from both ends"]
    notices = local.write(operations.get("average").task(group=2), tmp_path / "odd.mrc", tmp_path / "a.mrc")
    assert len(notices) == 1 and "the last 1 of 5 sections make no complete group" in notices[0]
    done = noa("bin", str(tmp_path / "odd.mrc"), str(tmp_path / "c.mrc"), "--factor", "2")
    assert done.returncode == 0 and "pixel(s) left over, cropped evenly" in done.stderr


def test_outputs_beyond_any_file_are_refused_before_anything_is_made(tmp_path):
    """Issue 32 item 9: resize to 2147483647 x 2147483647 ended in OverflowError, broadcast to 2**40 sections in
    MemoryError (a 1 TiB bookkeeping array), both exit 1. Now one line, exit 2, nothing left behind."""
    src = tmp_path / "one.mrc"
    write_bdhw(src, np.zeros((1, 1, 8, 10), np.float32))
    for args in (["resize", "--shape", "2147483647,2147483647"], ["broadcast", "--shape", "1099511627776,1,8,10"]):
        for out in (tmp_path / "big.mrc", tmp_path / "big.tif"):
            result = noa(args[0], src, out, *args[1:])
            assert_user_error(result, "one.mrc: the output of shape", "more than the 256 TiB")
            assert sorted(p.name for p in tmp_path.iterdir()) == ["one.mrc"]
