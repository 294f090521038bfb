"""Streaming outputs: block writes, tiled copies of strided views, statistics, cleanup, bounded memory."""

from __future__ import annotations

import dataclasses
import errno
import os
import subprocess
import sys
from pathlib import Path

import mrcfile
import numpy as np
import pytest

import noa_core
from helpers import write_mrc
from noa_core import io
from noa_core.array import layout
from noa_core.compute import tiles
from noa_core.compute.moments import RunningStatistics
from noa_core.errors import LayoutError, TruncatedFileError
from noa_core.io import mapped, stream
from noa_core.operations.plan import converter


def test_copy_into_permuted_and_broadcast_views(tmp_path):
    data = np.random.default_rng(0).normal(size=(2, 3, 4, 5)).astype(np.float32)
    src = noa_core.asarray(data)
    for i, perm in enumerate([(0, 3, 2, 1), (1, 0, 3, 2), (3, 2, 1, 0)]):
        view = src.permute(perm)
        with io.create(tmp_path / f"p{i}.mrc", view.shape, "float32") as out:
            io.copy_into(view, out, block_bytes=4 << 20)
        back, md = io.read(tmp_path / f"p{i}.mrc")
        np.testing.assert_array_equal(back.numpy(), data.transpose(perm))
        assert md.statistics.max == data.max() and md.statistics.rms == pytest.approx(data.std(), rel=1e-5)
    row = noa_core.asarray(data[:1, :1, :1, :])
    with io.create(tmp_path / "b.mrc", (2, 3, 4, 5), "float32") as out:
        io.copy_into(row, out)  # broadcasts onto the output shape
    np.testing.assert_array_equal(io.read(tmp_path / "b.mrc")[0].numpy(),
                                  np.broadcast_to(data[:1, :1, :1], (2, 3, 4, 5)))


def test_write_block_sections_and_statistics(tmp_path):
    data = np.arange(2 * 3 * 4 * 5, dtype=np.int16).reshape(2, 3, 4, 5) - 50
    with io.create(tmp_path / "s.mrc", data.shape, "int16", order="F") as out:
        out.write_block(0, data.reshape(6, 4, 5)[:4])  # crosses the batch boundary
        with pytest.raises(LayoutError, match="already written"):
            out.write_block(3, data.reshape(6, 4, 5)[3:])
        out.write_block(4, data.reshape(6, 4, 5)[4:])
    back, _md = io.read(tmp_path / "s.mrc")
    assert back.order == "F"
    np.testing.assert_array_equal(back.numpy(), data)
    with mrcfile.open(tmp_path / "s.mrc") as ref:
        assert (float(ref.header.dmin), float(ref.header.dmax)) == (data.min(), data.max())
        assert float(ref.header.dmean) == pytest.approx(data.mean())
        assert float(ref.header.rms) == pytest.approx(data.std(), rel=1e-6)


def test_direct_writes_through_array_get_statistics(tmp_path):
    with io.create(tmp_path / "d.mrc", (1, 2, 3, 4), "float32") as out:
        assert out.array.writable
        out.array.numpy()[...] = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    with mrcfile.open(tmp_path / "d.mrc") as ref:
        assert (float(ref.header.dmin), float(ref.header.dmax), float(ref.header.dmean)) == (0, 23, 11.5)


def test_failure_leaves_nothing_behind(tmp_path):
    with pytest.raises(RuntimeError), io.create(tmp_path / "x.mrc", (1, 1, 4, 4), "float32") as out:
        out.array.numpy()[...] = 1
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_running_statistics_match_numpy():
    rng = np.random.default_rng(3)
    data = rng.normal(5, 2, size=1000) + 1j * rng.normal(size=1000)
    for values in (data.real, data):
        stats = RunningStatistics()
        for part in np.array_split(values, 7):
            stats.add(part)
        result = stats.result()
        assert result.rms == pytest.approx(values.std())
        if values.dtype.kind != "c":
            assert (result.min, result.max) == (values.min(), values.max())
            assert result.mean == pytest.approx(values.mean())


@pytest.mark.parametrize("perm", [(0, 1, 2, 3), (0, 1, 3, 2), (0, 3, 2, 1), (2, 1, 0, 3)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_tiles_stay_within_budget_and_cover_everything(perm, order):
    shape = (3, 64, 512, 768)
    dst = layout.strides_for(shape, order)
    src = layout.permute(layout.strides_for(layout.permute(shape, layout.inverse_permutation(perm))), perm)
    budget = 8 << 20
    tile = stream.plan_tile(shape, [(src, 4)], budget, output=(dst, 4))
    runs, span = tiles._source_runs(np.array([tile]), src, 4)
    assert runs[0] * span[0] <= budget  # what read_view buffers, gaps included
    assert np.prod(tile) * 4 <= budget
    covered = np.zeros(shape[:2] + (shape[2] // 64, shape[3] // 64), np.int32)
    count = 0
    for key in stream.tiles(shape, tile, dst):
        count += 1
        covered[key[0], key[1], key[2].start // 64:-(-key[2].stop // 64), key[3].start // 64:-(-key[3].stop // 64)] += 1
    assert count == np.prod([-(-n // t) for n, t in zip(shape, tile)])
    assert covered.min() >= 1


def test_run_counts_follow_contiguity():
    """Exhaustive on small cases: the runs the planner counts are those a brute force finds."""
    import itertools

    shape = (2, 3, 4, 5)
    for order in ("C", "F"):
        strides = layout.strides_for(shape, order)
        for tile in itertools.product(*(range(1, n + 1) for n in shape)):
            offsets = sorted(sum(i * s for i, s in zip(index, strides))
                             for index in itertools.product(*(range(t) for t in tile)))
            brute = 1 + sum(b != a + 1 for a, b in itertools.pairwise(offsets))
            runs, span = tiles._output_runs(np.array([tile]), shape, strides, 4)
            assert (runs[0], span[0]) == (brute, np.prod(tile) * 4 // brute), (order, tile)


def test_pwritten_tiles_land_where_numpy_puts_them(tmp_path):
    """Every tile shape of a small output, written by TileFile into a C and an F file, against NumPy."""

    shape = (2, 3, 4, 5)
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    for order in ("C", "F"):
        for tile in [(1, 1, 1, 1), (1, 2, 3, 2), (2, 3, 4, 5), (1, 3, 4, 2), (2, 1, 2, 5)]:
            with io.create(tmp_path / f"t{order}.mrc", shape, "float32", order=order, overwrite=True) as out:
                target = stream.TileFile(out.region())
                try:
                    with mapped.scratch_buffers():
                        for key in stream.tiles(shape, tile, out.array.strides):
                            buffer = target.buffer(key, -1)
                            buffer[...] = data[key]
                            target.write(key, buffer)
                finally:
                    target.close()
                np.testing.assert_array_equal(out.array.numpy(), data, err_msg=f"{order} {tile}")
                out.complete(RunningStatistics.of(data))


def test_an_output_without_statistics_is_filled_unmeasured(tmp_path, monkeypatch):
    """A region marked unmeasured (a picture's pixels, which have no header) is filled tile by tile without the
    pass over each tile that statistics take: its tiles' statistics are empty, its values NumPy's."""
    data = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    src = noa_core.asarray(data)

    def measured(block):
        raise AssertionError("a tile was measured")

    def copied(blocks, out):
        np.copyto(out.numpy(), blocks[0].numpy())

    with io.create(tmp_path / "u.mrc", data.shape, "float32") as out:
        region = dataclasses.replace(out.region(), measured=False)
        keys = tiles.plan_tiles(out, [src], 4 * 4 * 5 * 4, ())
        assert len(keys) > 1  # several tiles: measured, if at all, by the writer thread
        with monkeypatch.context() as patched:
            patched.setattr(RunningStatistics, "of", measured)
            per_tile = region.fill(tiles.same_tile([src], out.shape, copied), keys)
        assert [s.moments.count for s in per_tile] == [0] * len(keys)
        out.complete(RunningStatistics.of(data))
    np.testing.assert_array_equal(io.read(tmp_path / "u.mrc")[0].numpy(), data)


def _plain_copy(tmp_path, data: np.ndarray) -> Path:
    """``data`` written by mrcfile, then copied tile by tile (a section each) into c.mrc as an operation copies a
    file (a plain conversion: the engine reads each tile into the buffer it writes from)."""
    write_mrc(tmp_path / "in.mrc", data)
    source, _ = io.read(tmp_path / "in.mrc")
    with io.create(tmp_path / "c.mrc", (1, *data.shape), data.dtype) as out:
        keys = tiles.plan_tiles(out, [source], data[0].nbytes, ())
        assert len(keys) == len(data)
        stream.fill(out, [source], converter("checked"), keys=keys)
    return tmp_path / "c.mrc"


def test_a_plain_copy_of_a_files_runs_is_copied_by_the_kernel_and_measured_as_read(tmp_path, monkeypatch):
    """A tile whose bytes are the input file's as they lie there, one run in each file, is copied from file to file
    by the kernel (copy_file_range), its statistics taken from the bytes read: the output is mrcfile's input, its
    header statistics NumPy's."""
    data = np.random.default_rng(3).normal(5, 2, (4, 6, 8)).astype(np.float32)
    copied = []
    monkeypatch.setattr(os, "copy_file_range", lambda *args, real=os.copy_file_range: copied.append(args[2]) or
                        real(*args))
    with mrcfile.open(_plain_copy(tmp_path, data)) as out:
        np.testing.assert_array_equal(out.data, data)
        assert (float(out.header.dmin), float(out.header.dmax)) == (data.min(), data.max())
        assert float(out.header.dmean) == pytest.approx(data.mean(dtype=np.float64), rel=1e-6)
        assert float(out.header.rms) == pytest.approx(data.std(dtype=np.float64), rel=1e-6)
    assert copied == [data[0].nbytes] * len(data)


def test_a_plain_copy_where_the_file_system_cannot_copy_writes_what_was_read(tmp_path, monkeypatch):
    def cannot(*args):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    data = np.arange(4 * 6 * 8, dtype=np.int16).reshape(4, 6, 8)
    monkeypatch.setattr(os, "copy_file_range", cannot)
    np.testing.assert_array_equal(mrcfile.read(_plain_copy(tmp_path, data)), data)


def test_an_input_that_shrank_before_its_copy_is_an_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "copy_file_range", lambda *args: 0)  # what the kernel copies past the end of the file
    with pytest.raises(TruncatedFileError, match=r"in\.mrc: data: the file changed size while being read"):
        _plain_copy(tmp_path, np.zeros((2, 3, 4), np.float32))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mrc"]


_SMALL_TILES = """
import sys, numpy as np
from noa_core import io
import noa_core
from noa_core.compute import compute_path, tiles

def copied(blocks, out):
    np.copyto(out.numpy(), blocks[0].numpy())

data = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
with compute_path.for_size(data.nbytes):
    with io.create(sys.argv[1], data.shape, "float32") as out:
        src = noa_core.asarray(data)
        keys = tiles.plan_tiles(out, [src], 4 * 4 * 5 * 4, ())
        assert len(keys) > 1
        stats = out.region().fill(tiles.same_tile([src], out.shape, copied), keys)
        assert sum(s.moments.count for s in stats) == data.size
        out.complete(stats[0])
assert "numba" not in sys.modules, "numba imported"
"""


def test_small_work_is_measured_on_the_path_the_driver_chose_in_the_writer_thread_too(tmp_path):
    """The writer thread takes each tile's statistics in the context of the thread that submitted it: small work
    (the NumPy path) loads no numba there either (a thread starts with an empty context)."""
    done = subprocess.run([sys.executable, "-c", _SMALL_TILES, str(tmp_path / "s.mrc")], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NOA_COMPUTE": "auto"})
    assert done.returncode == 0, done.stderr[-2000:]


_GENERATE = """
import sys, numpy as np
from noa_core import io
path, n = sys.argv[1], int(sys.argv[2])
with io.create(path, (1, n, n, n), "float32") as out:
    base = np.arange(n * n, dtype=np.float32).reshape(n, n)
    for d in range(0, n, 16):
        out.write_block(d, base[None] + np.arange(d, min(d + 16, n), dtype=np.float32)[:, None, None] * 0.5)
"""

_PERMUTE = """
import sys
import noa_core as noa
from noa_core import io
def peak():
    # this process's own peak (VmHWM): ru_maxrss would carry the peak of the pytest worker it was forked from
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset VmHWM to what is resident now
src, dst, perm, block = sys.argv[1], sys.argv[2], tuple(int(p) for p in sys.argv[3]), int(sys.argv[4])
noa.copy(noa.zeros((1, 1, 4, 4)))  # load numba and the copy kernels: the process's baseline
baseline = peak()
array, md = io.read(src)
view = array.permute(perm)
with io.create(dst, view.shape, view.dtype, md.permute(perm)) as out:
    io.copy_into(view, out, block_bytes=block)
print(baseline, peak())
"""


def _streamed_permute(tmp_path, n: int, perm: str, block_bytes: int = stream.TILE_BYTES) -> tuple[int, int]:
    """(baseline, peak) resident KiB of a child process streaming ``perm`` over an n^3 float32 volume."""
    src, dst = tmp_path / "big.mrc", tmp_path / "out.mrc"
    subprocess.run([sys.executable, "-c", _GENERATE, str(src), str(n)], check=True)
    done = subprocess.run([sys.executable, "-c", _PERMUTE, str(src), str(dst), perm, str(block_bytes)], check=True,
                          capture_output=True, text=True)
    baseline_kib, peak_kib = (int(v) for v in done.stdout.split()[-2:])
    a, b = io.read(src)[0].numpy(), io.read(dst)[0].numpy()
    p = tuple(int(c) for c in perm)
    for i in (0, n // 3, n - 1):  # spot checks against NumPy on the same views
        np.testing.assert_array_equal(b[0, i], a.transpose(p)[0, i])
    stats = io.read(dst)[1].statistics
    assert stats.mean == pytest.approx((n * n - 1) / 2 + 0.25 * (n - 1))
    return baseline_kib, peak_kib


@pytest.mark.slow
def test_streamed_permute_of_4gb_file_keeps_memory_bounded(tmp_path):
    """A 4 GiB float32 volume (1024^3) transposed (H <-> W) in a child process: peak RSS < 1 GB."""
    baseline_kib, peak_kib = _streamed_permute(tmp_path, 1024, "0132")
    print(f"peak resident memory: {peak_kib / 1024:.0f} MiB (baseline {baseline_kib / 1024:.0f} MiB)")
    assert peak_kib < 1_000_000


@pytest.mark.slow
def test_streamed_depth_width_swap_keeps_memory_bounded(tmp_path):
    """The hardest permutation (depth <-> width) on a 512 MiB volume, with 32 MiB tiles: the growth over
    the process's baseline stays within a few tiles, far below the file size."""
    baseline_kib, peak_kib = _streamed_permute(tmp_path, 512, "0321", block_bytes=32 << 20)
    assert peak_kib - baseline_kib < 200_000, (baseline_kib, peak_kib)
