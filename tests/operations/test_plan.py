"""Each built-in operation tested directly: its plan (decided from the headers) and its result through the
local driver, against NumPy on data written and read back by mrcfile (an independent reader)."""

from __future__ import annotations

import mrcfile
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import EXAMPLE_MAP, load, write_mrc
from noa_core import operations
from noa_core.compute.moments import RunningStatistics
from noa_core.errors import BroadcastError, OutputIsInputError, PermutationError
from noa_core.io import mapped, stream
from noa_core.run import local

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
shapes = st.tuples(*(st.integers(1, 4) for _ in range(4)))


def write_bdhw(path, data: np.ndarray) -> None:
    """A BDHW array as other software stores it: a volume stack, an image stack or a volume."""
    b, d, h, w = data.shape
    if b > 1 and d > 1:
        write_mrc(path, data)  # mrcfile writes 4-d data as a volume stack (ispg 401)
    elif b > 1:
        write_mrc(path, data.reshape(b, h, w), stack=True)
    else:
        write_mrc(path, data.reshape(d, h, w))


def read_bdhw(path, shape) -> np.ndarray:
    """What mrcfile reads, as BDHW: sections are packed in C order whatever the kind."""
    with mrcfile.open(path) as f:
        return np.array(f.data).reshape(shape)


def values(shape) -> np.ndarray:
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape) - 7.5


@SETTINGS
@given(shape=shapes, perm=st.permutations(range(4)))
def test_permute_plan_and_result(tmp_path, shape, perm):
    data = values(shape)
    write_bdhw(tmp_path / "in.mrc", data)
    plan = operations.get("permute").task(axes=perm).plan(tmp_path / "in.mrc")
    assert plan.shape == tuple(shape[p] for p in perm) and plan.input_shapes == [shape]
    assert plan.dtype == np.float32 and plan.order == "C"
    assert plan.label == f"noa permute --axes {','.join(map(str, perm))}"
    assert mapped.is_mapped(plan.sources[0].numpy())  # a view of the mapped file: nothing read yet
    local.write_plan(plan, tmp_path / "out.mrc", overwrite=True)
    np.testing.assert_array_equal(read_bdhw(tmp_path / "out.mrc", plan.shape), np.transpose(data, perm))


@SETTINGS
@given(shape=shapes, grow=st.tuples(*(st.integers(1, 3) for _ in range(4))))
def test_broadcast_plan_and_result(tmp_path, shape, grow):
    source = tuple(1 if g > 1 else n for n, g in zip(shape, grow))  # size-1 where the target grows
    target = tuple(n * g if g > 1 else n for n, g in zip(source, grow))
    data = values(source)
    write_bdhw(tmp_path / "in.mrc", data)
    plan = operations.get("broadcast").task(shape=target).plan(tmp_path / "in.mrc")
    assert plan.shape == target and plan.input_shapes == [source]
    local.write_plan(plan, tmp_path / "out.mrc", overwrite=True)
    np.testing.assert_array_equal(read_bdhw(tmp_path / "out.mrc", target), np.broadcast_to(data, target))


def test_broadcast_and_permute_refuse_in_the_plan(tmp_path):
    write_bdhw(tmp_path / "in.mrc", values((1, 2, 3, 4)))
    with pytest.raises(BroadcastError, match=r"\(1, 2, 3, 4\).*\(1, 3, 3, 4\)"):
        operations.get("broadcast").task(shape=(1, 3, 3, 4)).plan(tmp_path / "in.mrc")
    with pytest.raises(PermutationError):
        operations.get("permute").task(axes=(0, 1, 1, 3)).plan(tmp_path / "in.mrc")


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype, clamp", [(None, False), ("int16", True), ("int8", True)])
def test_copy_plan_and_result(tmp_path, order, dtype, clamp):
    data = values((3, 1, 5, 6)) * 40  # -300 .. 1140: int16 holds them, int8 clamps at both ends
    write_bdhw(tmp_path / "in.mrc", data)
    plan = operations.get("copy").task(order=order, dtype=dtype, clamp=clamp).plan(tmp_path / "in.mrc")
    expected_type = np.dtype(dtype or "float32")
    assert plan.order == order and plan.dtype == expected_type and plan.shape == (3, 1, 5, 6)
    local.write_plan(plan, tmp_path / "out.mrc", overwrite=True)
    with mrcfile.open(tmp_path / "out.mrc") as f:
        stored = np.array(f.data)
        mapping = (int(f.header.mapc), int(f.header.mapr))
    if order == "F":  # sections stored column-major, recorded as mapc=2, mapr=1 (mrcfile ignores it)
        assert mapping == (2, 1)
        stored = stored.reshape(3, 6, 5).transpose(0, 2, 1)
    expected = data if dtype is None else np.clip(data, np.iinfo(dtype).min, np.iinfo(dtype).max).astype(dtype)
    assert stored.dtype == expected.dtype
    np.testing.assert_array_equal(stored.reshape(3, 1, 5, 6), expected)


def test_ewise_plan_broadcasts_and_follows_numpy(tmp_path):
    a, b = values((2, 1, 3, 4)), values((1, 1, 3, 1)) / 2
    write_bdhw(tmp_path / "a.mrc", a)
    write_bdhw(tmp_path / "b.mrc", b)
    task = operations.get("ewise").task(expression="a * b + 1", shared=[tmp_path / "b.mrc"])
    plan = task.plan(tmp_path / "a.mrc")
    assert plan.shape == (2, 1, 3, 4) and plan.input_shapes == [(2, 1, 3, 4), (1, 1, 3, 1)]
    assert plan.dtype == np.float32 and plan.inputs == [tmp_path / "a.mrc", tmp_path / "b.mrc"]
    local.write(task, tmp_path / "a.mrc", tmp_path / "out.mrc")
    np.testing.assert_allclose(read_bdhw(tmp_path / "out.mrc", (2, 1, 3, 4)), a * b + 1, rtol=1e-6)
    with pytest.raises(OutputIsInputError):
        local.write(task, tmp_path / "a.mrc", tmp_path / "b.mrc", overwrite=True)


def test_info_reports_the_header_as_mrcfile_reads_it():
    described = operations.get("info").describe(EXAMPLE_MAP)
    with mrcfile.open(EXAMPLE_MAP, permissive=True) as f:
        nz, ny, nx = f.data.shape
        voxel = f.voxel_size
        assert described["mode"] == int(f.header.mode)
    assert described["shape"] == [1, nz, ny, nx] and described["kind"] == "volume"
    assert described["pixel_size"] == pytest.approx([float(voxel.z), float(voxel.y), float(voxel.x)])
    assert described["strides"] == [nz * ny * nx, ny * nx, nx, 1]


def test_stats_match_numpy(tmp_path):
    data = np.random.default_rng(5).normal(3, 2, (4, 6, 7)).astype(np.float32)
    write_mrc(tmp_path / "s.mrcs", data, stack=True)
    result = operations.get("stats").describe(tmp_path / "s.mrcs", per_batch=True)
    assert result["shape"] == [4, 1, 6, 7]
    for name, reference in (("min", np.min), ("max", np.max), ("mean", np.mean), ("std", np.std)):
        assert result[name] == pytest.approx(float(reference(data.astype(np.float64))), rel=1e-5), name
        per = [row[name] for row in result["per_batch"]]
        assert per == pytest.approx([float(reference(s.astype(np.float64))) for s in data], rel=1e-5), name
    assert "s.mrcs" in operations.get("stats").text(result)


@pytest.mark.parametrize("order, suffix", [("C", ".mrc"), ("F", ".mrc"), ("C", ".tif")])
def test_copy_flip_y_reverses_rows_in_every_tile(tmp_path, order, suffix):
    from noa_core import io

    data = np.random.default_rng(2).normal(size=(40, 256, 200)).astype(np.float32)  # 8 MB: several 4 MiB tiles
    write_mrc(tmp_path / "in.mrc", data)
    plan = operations.get("copy").task(flip_y=True, order=order).plan(tmp_path / "in.mrc")
    assert plan.whole_axes == (2,) and plan.label.endswith("--flip-y")
    out = tmp_path / f"out{suffix}"
    with plan.create(out, overwrite=True) as writer:
        keys = stream.plan_tiles(writer, plan.sources, 4 << 20, plan.whole_axes)
        assert len(keys) > 1 and all(key[2] == slice(0, 256) for key in keys)  # every tile has whole columns
        io.fill(writer, plan.sources, plan.compute, block_bytes=4 << 20, whole=plan.whole_axes)
    stored = load(out)
    if order == "F":  # sections column-major (mrcfile ignores the recorded mapping)
        stored = stored.transpose(0, 2, 1)
    np.testing.assert_array_equal(stored.reshape(data.shape), data[:, ::-1, :])


def test_flip_y_through_the_cli_matches_tifffile(tmp_path):
    import tifffile

    from helpers import noa

    data = np.arange(6 * 5 * 7, dtype=np.uint16).reshape(6, 5, 7)
    tifffile.imwrite(tmp_path / "in.tif", data, photometric="minisblack")
    done = noa("copy", tmp_path / "in.tif", tmp_path / "out.mrc", "--flip-y")
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(load(tmp_path / "out.mrc"), np.flip(tifffile.imread(tmp_path / "in.tif"), axis=1))


@pytest.mark.parametrize("scheduler", [None, "dask"])
def test_plan_with_reads_computes_each_tile_from_its_own_source_region(tmp_path, scheduler):
    """A plan whose tiles do not read the same tiles of the input (here: the mean of 2x2 blocks of H, W,
    as a binning would): each output tile reads its own region, locally and in split Dask tasks alike."""
    from noa_core import io
    from noa_core.array import asarray
    from noa_core.operations.plan import region_plan

    data = np.random.default_rng(5).normal(size=(24, 512, 300)).astype(np.float32)
    write_mrc(tmp_path / "in.mrc", data)
    source, meta = io.read(tmp_path / "in.mrc")
    b, d, h, w = source.shape
    shape = (b, d, h // 2, w // 2)

    def binned(blocks, out):
        x = blocks[0].numpy()
        out.numpy()[...] = x.reshape(*x.shape[:2], x.shape[2] // 2, 2, x.shape[3] // 2, 2).mean(axis=(3, 5))

    def reads(key):
        region = (*key[:2], *(slice(k.start * 2, k.stop * 2) for k in key[2:]))
        return [source[region]], binned

    plan = region_plan(operations.get("bin").options(factor=2), inputs=[tmp_path / "in.mrc"], read=[source], meta=meta,
                       shape=shape, reads=reads, read_factor=4)
    out = tmp_path / "out.mrc"
    with plan.create(out, overwrite=True) as writer:
        keys = plan.keys(writer, 4 << 20)
        assert len(keys) > 1  # several tiles, each planned with a quarter of the budget for its reads
        if scheduler is None:
            io.fill(writer, plan.sources, None, reads=plan.tile_reads(), keys=keys)
        else:  # what a Dask task runs: the region filled by path, two runs of tiles, statistics merged
            stats = RunningStatistics()
            half = len(keys) // 2
            for run in (keys[:half], keys[half:]):
                for tile_stats in writer.region().fill(plan.tile_reads(), run):
                    stats.merge(tile_stats)
            writer.complete(stats)
    expected = data.reshape(24, 256, 2, 150, 2).mean(axis=(2, 4))
    np.testing.assert_allclose(load(out), expected, rtol=1e-5, atol=1e-6)
    with mrcfile.open(out) as f:
        assert float(f.header.dmean) == pytest.approx(float(expected.mean()), rel=1e-5)
    assert asarray(expected).shape == (1, 24, 256, 150)


def test_ewise_inputs_that_grow_each_other_need_broadcast(tmp_path):
    """Issue 40 item 6: a volume times a stack of images wrote a 12 x 100^3 file with no word. A gain over a
    movie (one input has the output's shape) needs nothing; inputs that each grow the other need broadcast."""
    from noa_core.errors import ParameterError

    volume, stack = values((1, 4, 5, 6)), values((3, 1, 5, 6))
    write_bdhw(tmp_path / "volume.mrc", volume)
    write_bdhw(tmp_path / "stack.mrcs", stack)
    write_bdhw(tmp_path / "gain.mrc", values((1, 1, 5, 6)))
    task = operations.get("ewise").task(expression="a * b", shared=[tmp_path / "stack.mrcs"])
    with pytest.raises(ParameterError, match=r"no input has the output's shape 3 x 4 x 5 x 6") as refused:
        task.plan(tmp_path / "volume.mrc")
    assert refused.value.param == "broadcast"
    task = operations.get("ewise").task(expression="a * b", broadcast=True, shared=[tmp_path / "stack.mrcs"])
    local.write(task, tmp_path / "volume.mrc", tmp_path / "out.mrc")
    np.testing.assert_allclose(read_bdhw(tmp_path / "out.mrc", (3, 4, 5, 6)), volume * stack, rtol=1e-6)
    gain = operations.get("ewise").task(expression="a * b", shared=[tmp_path / "gain.mrc"])
    assert gain.plan(tmp_path / "stack.mrcs").shape == (3, 1, 5, 6)
