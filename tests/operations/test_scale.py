"""noa on Dask (noa_core.run.cluster, `--scheduler`): batches, resumption, one large file split over workers,
the shared kernel cache and the CLI, on a LocalCluster of 2 processes x 1 thread.

Outputs are compared byte for byte with the single-process result (the date in noa's MRC labels is one in every
test: tests/conftest.py).
"""

import importlib
import os
import subprocess
import sys
import types
from pathlib import Path

import mrcfile
import numpy as np
import pytest

from helpers import assert_same_file, noa

pytest.importorskip("distributed")

from noa_core import io, operations, run
from noa_core.errors import CorruptFileError, OutputExistsError, SchedulerError, TruncatedFileError
from noa_core.run import cluster, local, split_complete


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("numba-cache")


@pytest.fixture(scope="module")
def client(cache_dir):
    """Two single-threaded worker processes sharing a fresh (empty) kernel cache."""
    with cluster.connect("local", workers=2, cache_dir=str(cache_dir)) as c:
        yield c


def make_inputs(folder: Path, count: int) -> list[Path]:
    """Small MRC files of several kinds: image stacks and volumes, float32 and int16, with voxel
    sizes, origins and labels to carry."""
    folder.mkdir()
    rng = np.random.default_rng(8)
    paths = []
    for i in range(count):
        shape = ((3, 20, 36), (5, 16, 24), (7, 12, 40))[i % 3]
        data = rng.normal(i, 3, shape).astype(np.float32) if i % 2 else rng.integers(-900, 900, shape, np.int16)
        path = folder / f"file{i:02d}.mrc"
        with mrcfile.new(path, data) as f:
            f.set_image_stack() if i % 3 == 0 else f.set_volume()
            f.voxel_size = (1.0 + i / 10, 2.0, 3.5)
            f.header.origin = (i, -2.5, 7.0)
            f.add_label(f"input {i}")
        paths.append(path)
    return paths


def corrupt(folder: Path) -> list[Path]:
    truncated, garbage = folder / "truncated.mrc", folder / "garbage.tif"
    truncated.write_bytes((folder / "file01.mrc").read_bytes()[:1500])
    garbage.write_bytes(b"II*\x00" + b"\xff" * 600)
    return [truncated, garbage]


def test_batch_equals_single_process_byte_for_byte(tmp_path, client):
    inputs = make_inputs(tmp_path / "in", 36)
    scale = tmp_path / "scale.mrc"
    mrcfile.new(scale, np.full((1, 1, 1), 1.5, np.float32)).close()  # broadcasts onto every input
    for name, options in (("permute", {"axes": (0, 1, 3, 2)}),
                          ("ewise", {"expression": "a * b - 1", "dtype": "float32"})):
        op = operations.get(name).task(options, shared=[scale] if name == "ewise" else [])
        (tmp_path / name).mkdir()
        (tmp_path / f"{name}-ref").mkdir()
        pairs = [(p, tmp_path / name / p.name) for p in inputs]
        results = cluster.run_batch(op, pairs, client)
        assert [r.status for r in results] == ["written"] * len(inputs), [r.error for r in results]
        for src, dst in pairs:
            reference = tmp_path / f"{name}-ref" / src.name
            local.write(op, src, reference)
            assert_same_file(dst, reference)
    _, meta = io.read(tmp_path / "permute" / "file04.mrc")
    assert meta.pixel_size == pytest.approx((3.5, 1.4, 2.0)) and meta.origin == (7.0, 4.0, -2.5)  # (D, H, W)
    assert "input 4" in meta.labels and "noa permute --axes 0,1,3,2" in meta.labels[-1]


def test_a_corrupt_input_is_reported_and_the_rest_complete(tmp_path, client):
    inputs = make_inputs(tmp_path / "in", 6)
    inputs[3:3] = corrupt(tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    (out / "file05.mrc").write_bytes(b"not to be replaced")
    seen = []
    results = cluster.run_batch(operations.get("copy").task({"order": "F"}), [(p, out / p.name) for p in inputs],
                                client, on_result=seen.append)
    failed = {r.src.name: r.error for r in results if r.status == "failed"}
    assert set(failed) == {"truncated.mrc", "garbage.tif", "file05.mrc"}
    assert isinstance(failed["truncated.mrc"], TruncatedFileError) and "truncated.mrc" in str(failed["truncated.mrc"])
    assert isinstance(failed["garbage.tif"], CorruptFileError)
    assert isinstance(failed["file05.mrc"], OutputExistsError)
    assert sorted(r.src.name for r in seen) == sorted(p.name for p in inputs)
    assert (out / "file05.mrc").read_bytes() == b"not to be replaced"
    written = sorted(p.name for p in out.iterdir())  # no temporary file left behind
    assert written == sorted(f"file{i:02d}.mrc" for i in range(6))
    np.testing.assert_array_equal(io.read(out / "file02.mrc")[0].numpy(), io.read(inputs[2])[0].numpy())


def test_resume_skips_complete_outputs(tmp_path, client):
    inputs = make_inputs(tmp_path / "in", 12)
    out = tmp_path / "out"
    out.mkdir()
    op = operations.get("permute").task({"axes": (0, 2, 1, 3)})
    pairs = [(p, out / p.name) for p in inputs]
    cluster.run_batch(op, pairs[:8], client)  # an "interrupted" batch: 8 of 12 done
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    refused = cluster.run_batch(op, pairs, client)
    assert [r.status for r in refused] == ["failed"] * 8 + ["written"] * 4
    assert all(isinstance(r.error, OutputExistsError) for r in refused[:8])
    for _, dst in pairs[8:]:
        dst.unlink()
    resumed = cluster.run_batch(op, pairs, client, resume=True)
    assert [r.status for r in resumed] == ["skipped"] * 8 + ["written"] * 4
    assert {name: (out / name).stat().st_mtime_ns for name in before} == before
    assert len(list(out.iterdir())) == 12
    assert split_complete(pairs) == ([], pairs)


def test_a_second_worker_loads_kernels_from_the_shared_cache(tmp_path, client, cache_dir):
    """A kernel compiled by one worker lands in the shared cache; another worker running the same
    operation loads it: no cache file is added or rewritten, and numba counts hits, no misses."""
    first, second = sorted(client.scheduler_info()["workers"])
    assert set(client.run(lambda: __import__("numba").config.CACHE_DIR).values()) == {str(cache_dir)}
    src = make_inputs(tmp_path / "in", 1)[0]
    op = operations.get("copy").task({"dtype": "uint16", "clamp": True})  # a conversion no other test compiles

    def cache_files() -> dict[str, int]:
        return {str(p): p.stat().st_mtime_ns for p in cache_dir.rglob("*") if p.suffix in (".nbi", ".nbc")}

    def kernel_stats() -> tuple[int, int]:
        from noa_core.kernels import cpu

        stats = [k.stats for k in cpu._KERNELS.values()]
        return sum(sum(s.cache_hits.values()) for s in stats), sum(sum(s.cache_misses.values()) for s in stats)

    before = cache_files()
    client.submit(local.write, op, src, tmp_path / "a.mrc", workers=[first], pure=False).result()
    compiled = cache_files()
    assert len(compiled) > len(before)
    hits0, misses0 = client.run(kernel_stats, workers=[second])[second]
    client.submit(local.write, op, src, tmp_path / "b.mrc", workers=[second], pure=False).result()
    assert cache_files() == compiled
    hits, misses = client.run(kernel_stats, workers=[second])[second]
    assert hits > hits0 and misses == misses0, (hits0, hits, misses0, misses)


def test_connect_to_a_running_scheduler_points_workers_at_a_cache_dir(tmp_path, client, cache_dir):
    """An address joins a running cluster; cache_dir= reaches every worker through the worker plugin."""
    def cache_dirs(c) -> set[str]:
        return set(c.run(lambda: __import__("numba").config.CACHE_DIR).values())

    with cluster.connect(client.scheduler.address, cache_dir=str(tmp_path)) as remote:
        assert cache_dirs(remote) == {str(tmp_path)}
        remote.register_plugin(cluster.numba_cache_plugin(str(cache_dir)))  # back, for the other tests
    assert cache_dirs(client) == {str(cache_dir)}
    with pytest.raises(SchedulerError, match="workers"), cluster.connect(client.scheduler.address, workers=2):
        pass


def test_a_small_batch_on_the_local_scheduler_runs_on_threads_of_this_process(tmp_path):
    """Issue 40 item 11: `--scheduler local` started a worker process per core for 3 small files, seconds for work
    of milliseconds. Work the NumPy path does (cluster.local_cluster) runs on a worker of threads in this process;
    `workers` given still starts processes."""
    inputs = make_inputs(tmp_path / "in", 3)
    op = operations.get("permute").task({"axes": (0, 1, 3, 2)})
    for workers, here in ((None, True), (1, False)):
        out = tmp_path / f"out-{workers}"
        out.mkdir()
        with run.driver("local", workers=workers) as driver:
            results = driver.run_batch(op, [(p, out / p.name) for p in inputs])
            pids = set(driver.client.run(os.getpid).values())
        assert [r.status for r in results] == ["written"] * 3, [r.error for r in results]
        assert (pids == {os.getpid()}) is here, pids
        for src in inputs:
            np.testing.assert_array_equal(io.read(out / src.name)[0].numpy(),
                                          np.swapaxes(io.read(src)[0].numpy(), 2, 3))


def test_the_local_cluster_starts_without_its_dashboard(monkeypatch):
    """With bokeh installed, Dask's dashboard doubled a local cluster's start (2 s more on 2 cores) for a page noa
    never links to: the scheduler must not build it (a stand-in for bokeh's dashboard module records a build)."""
    built = []
    dashboard = types.ModuleType("distributed.dashboard.scheduler")
    dashboard.connect = lambda *args, **kwargs: built.append(args)
    monkeypatch.setitem(sys.modules, "distributed.dashboard.scheduler", dashboard)
    monkeypatch.setattr(importlib.import_module("distributed.dashboard"), "scheduler", dashboard, raising=False)
    with cluster.connect("local", work_bytes=0) as c:
        assert c.submit(sum, [1, 2]).result() == 3
    assert built == []


def test_split_write_equals_single_process_byte_for_byte(tmp_path, client):
    """One file split into tile tasks: same bytes, header included (statistics merged in tile order)."""
    src = tmp_path / "volume.mrc"
    data = np.random.default_rng(3).normal(5, 2, (64, 256, 320)).astype(np.float32)  # 20 MiB
    with mrcfile.new(src, data) as f:
        f.voxel_size = (1.5, 2.5, 3.5)
        f.header.origin = (10.0, 20.0, 30.0)
    for name, options, suffix in (("permute", {"axes": (0, 3, 2, 1)}, ".mrc"),
                                  ("copy", {"order": "F", "dtype": "float16"}, ".mrc"),
                                  ("copy", {"order": "C"}, ".tif")):  # TIFF data are one packed region too
        op = operations.get(name).task(options)
        ticks = []
        out, reference = tmp_path / f"{name}{suffix}", tmp_path / f"{name}-ref{suffix}"
        cluster.write_split(op, src, out, client, overwrite=True, block_bytes=cluster.MIN_BLOCK_BYTES,
                            progress=lambda done, total: ticks.append((done, total)))
        assert len(ticks) >= 2 and ticks[-1][0] == ticks[-1][1]  # really split, progress to the end
        local.write(op, src, reference, overwrite=True)
        assert_same_file(out, reference)


def _peak_rss_kib() -> int:
    """This process's peak resident memory (VmHWM: reset at exec, unlike ru_maxrss)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_out_of_core_permute_of_a_2gib_file_keeps_workers_small(tmp_path, client):
    """A 2 GiB float32 volume (sparse on disk: a few sections hold data) transposed by tile tasks:
    sampled blocks equal NumPy, the header is right, and no worker's peak memory nears the file size."""
    src, dst = tmp_path / "big.mrc", tmp_path / "big_t.mrc"
    shape = (512, 1024, 1024)
    sections = range(0, 512, 73)
    with mrcfile.new_mmap(src, shape=shape, mrc_mode=2) as f:
        f.set_volume()
        f.voxel_size = (1.0, 2.0, 3.0)
        ramp = np.arange(1024, dtype=np.float32)
        for d in sections:
            f.data[d] = ramp[:, None] * 0.5 - ramp[None, :] + d
    cluster.write_split(operations.get("permute").task({"axes": (0, 1, 3, 2)}), src, dst, client, block_bytes=32 << 20)
    peaks = client.run(_peak_rss_kib)
    print(f"worker peak resident memory (MiB): {sorted(v // 1024 for v in peaks.values())}")
    assert max(peaks.values()) < 512 * 1024, peaks  # the file is 2048 MiB

    expected = np.memmap(src, np.float32, "r", offset=1024, shape=shape)
    got, meta = io.read(dst)
    got = got.numpy()
    assert got.shape == (1, 512, 1024, 1024)
    rng = np.random.default_rng(0)
    for d in [*sections, 1, 511]:
        h0, w0 = rng.integers(0, 1024 - 64, 2)
        np.testing.assert_array_equal(got[0, d, h0:h0 + 64, w0:w0 + 64], expected[d, w0:w0 + 64, h0:h0 + 64].T)
    assert meta.pixel_size == (3.0, 1.0, 2.0)  # (D, H, W): X and Y exchanged
    filled = np.stack([expected[d] for d in sections]).astype(np.float64)
    count = np.prod(shape)
    mean = filled.sum() / count
    assert meta.statistics.min == pytest.approx(filled.min()) and meta.statistics.max == pytest.approx(filled.max())
    assert meta.statistics.mean == pytest.approx(mean, rel=1e-5)
    assert meta.statistics.rms == pytest.approx(np.sqrt((filled ** 2).sum() / count - mean ** 2), rel=1e-5)


# -- the command line -------------------------------------------------------------------------------


def test_cli_scheduler_local_batch_single_file_and_exit_codes(tmp_path):
    inputs = make_inputs(tmp_path / "in", 5) + corrupt(tmp_path / "in")[:1]
    out, ref = tmp_path / "out", tmp_path / "ref"
    out.mkdir()
    ref.mkdir()
    batch = noa("permute", *inputs, "--out-dir", out, "--axes", "0,1,3,2", "--scheduler", "local", "--workers", "2")
    assert batch.returncode == 2, batch.stderr
    errors = [line for line in batch.stderr.splitlines() if line.startswith("noa: error:")]
    assert len(errors) == 2 and "truncated.mrc" in errors[0] and "header" in errors[0], batch.stderr
    assert errors[1] == "noa: error: 1 of 6 inputs failed"
    assert "Traceback" not in batch.stderr
    single = noa("permute", inputs[0], tmp_path / "single.mrc", "--axes", "0,1,3,2", "--scheduler", "local")
    assert single.returncode == 0, single.stderr
    assert noa("permute", *inputs[:5], "--out-dir", ref, "--axes", "0,1,3,2").returncode == 0
    for src in inputs[:5]:
        assert_same_file(out / src.name, ref / src.name)
    assert_same_file(tmp_path / "single.mrc", ref / inputs[0].name)


def test_cli_resume_without_scheduler(tmp_path):
    inputs = make_inputs(tmp_path / "in", 4)
    out = tmp_path / "out"
    out.mkdir()
    assert noa("copy", *inputs[:2], "--out-dir", out, "--to", "tif").returncode == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    again = noa("copy", *inputs, "--out-dir", out, "--to", "tif")
    assert again.returncode == 2 and again.stderr.count("exists") == 2  # the other two are written
    for name in ("file02.tif", "file03.tif"):
        (out / name).unlink()
    resumed = noa("copy", *inputs, "--out-dir", out, "--to", "tif", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.count("skipped") == 2 and resumed.stderr.count("wrote") == 2
    assert {name: (out / name).stat().st_mtime_ns for name in before} == before
    both = noa("copy", *inputs, "--out-dir", out, "--to", "tif", "--resume", "--force")
    assert both.returncode == 2 and "choose one" in both.stderr


def test_cli_scheduler_errors_are_one_line(tmp_path):
    src = make_inputs(tmp_path / "in", 1)[0]
    unreachable = noa("permute", src, tmp_path / "o.mrc", "--axes", "0,1,3,2", "--scheduler", "tcp://127.0.0.1:9",
                      env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"})
    assert unreachable.returncode == 2
    assert unreachable.stderr.strip() == "noa: error: tcp://127.0.0.1:9: scheduler: not reachable within 2 s"
    assert not (tmp_path / "o.mrc").exists()
    # dask missing (import blocked): the same one-line error form, naming the extra to install
    code = ("import sys; sys.modules['distributed'] = None; from noa_cli.main import run; "
            f"run(['permute', {str(src)!r}, {str(tmp_path / 'o.mrc')!r}, '--axes', '0,1,3,2', '--scheduler', 'local'])")
    missing = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "install noa[dask]" in missing.stderr


def test_core_and_cli_do_not_import_dask(tmp_path):
    src = make_inputs(tmp_path / "in", 1)[0]
    code = ("import sys, noa_core, noa_core.run.cluster; from noa_cli.app import app\n"
            "for args in (['--help'], ['info', sys.argv[1]], ['permute', '--help']):\n"
            "    try: app(args, standalone_mode=False)\n"
            "    except SystemExit: pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))")
    done = subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
