"""`noa warmup`: its units of work and how they are split over workers, its progress lines, and the
cache its worker processes leave (after which a numba-path command compiles nothing)."""

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import tifffile
from fastapi.testclient import TestClient

from helpers import NOA, write_mrc
from noa_core.compute import compute_path
from noa_core.run import warmup as warmup_module
from noa_core.run.warmup import FILE_DTYPES, STAR, Unit, split, units
from noa_server import service as service_module
from noa_server.app import create_app
from noa_server.settings import Settings

STEP = re.compile(r"^\[(\d+)/(\d+)\] (.+) (\S+)$")


def test_every_unit_is_in_exactly_one_chunk_of_one_element_type():
    work = units()
    assert len(work) == len(set(work)) > 0
    chunks = split(work)
    assert sorted(unit for chunk in chunks for unit in chunk) == sorted(work)
    assert all(len({unit.dtype for unit in chunk}) == 1 for chunk in chunks)
    assert {chunk[0].dtype for chunk in chunks} == {*FILE_DTYPES, "text"}
    # Every registered operation with warm-up cases for every type (one size: a kernel has one version), and
    # the STAR tables' kernels.
    assert {unit.operation for unit in work} >= {"copy", "bin", STAR}
    assert {unit.dtype for unit in work if unit.operation == "copy"} == set(FILE_DTYPES)


def test_split_keeps_each_units_order_and_any_list():
    work = [Unit("b", "int8"), Unit("a", "uint8"), Unit("a", "int8"), Unit("c", "uint8")]
    assert split(work) == [[work[0], work[2]], [work[1], work[3]]]
    assert split([]) == []


def test_in_process_progress_counts_up_and_stop_ends_it(monkeypatch):
    """One process (jobs=1): progress after each unit, and no unit starts once ``stop`` is set."""
    ran, steps, stop = [], [], threading.Event()

    def fake_run(unit, folder, flag):
        ran.append(unit)
        if len(ran) == 3:
            stop.set()

    monkeypatch.setattr(warmup_module, "_run", fake_run)
    warmup_module.warmup(progress=lambda *step: steps.append(step), jobs=1)
    assert len(ran) == len(steps)  # no stop given: it runs on
    total = len(units())
    assert ran == units() and [step[:2] for step in steps] == [(done, total) for done in range(1, total + 1)]
    assert steps[0][2] == str(ran[0])

    ran.clear()
    stop.clear()
    warmup_module.warmup(stop, jobs=1)
    assert len(ran) == 3


def test_warmup_once_per_installation(monkeypatch, tmp_path):
    """The first call compiles and marks the cache folder; later calls (other processes, a service started
    after `noa warmup`) find the mark and compile nothing, until noa's sources or numba change."""
    ran = []
    monkeypatch.setattr(warmup_module, "_run", lambda unit, folder, flag: ran.append(unit))
    monkeypatch.setattr(warmup_module.runtime, "cache_folder", lambda: tmp_path)
    assert not warmup_module.warmed()
    assert warmup_module.warmup_once() == "compiled" and ran == units()
    assert warmup_module.warmed()
    ran.clear()
    assert warmup_module.warmup_once() == "cached" and ran == []
    monkeypatch.setattr(warmup_module, "installation_key", lambda: "other-sources")
    assert not warmup_module.warmed()
    assert warmup_module.warmup_once() == "compiled" and ran == units()
    assert [p.name for p in tmp_path.glob("noa-warmup-*.done")] == ["noa-warmup-other-sources.done"]


def test_a_stopped_warmup_leaves_no_mark(monkeypatch, tmp_path):
    stop = threading.Event()
    monkeypatch.setattr(warmup_module, "_run", lambda unit, folder, flag: stop.set())
    monkeypatch.setattr(warmup_module.runtime, "cache_folder", lambda: tmp_path)
    assert warmup_module.warmup_once(stop) == "stopped"
    assert not warmup_module.warmed()


def test_a_second_process_does_not_compile_beside_the_first(monkeypatch, tmp_path):
    """Another process holding the warm-up's lock (compiling into the same cache): this one returns at once."""
    monkeypatch.setattr(warmup_module.runtime, "cache_folder", lambda: tmp_path)
    monkeypatch.setattr(warmup_module, "_run", lambda unit, folder, flag: pytest.fail("compiled twice"))
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time\n"
                               f"f = open({str(tmp_path / 'noa-warmup.lock')!r}, 'a')\n"
                               "fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert warmup_module.warmup_once() == "compiling elsewhere"
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture(scope="module")
def warmed(tmp_path_factory):
    """`noa warmup --jobs 2` run once, on an empty cache: (its result, the cache folder)."""
    cache = tmp_path_factory.mktemp("numba-cache")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), COLUMNS="200")
    env.pop("NUMBA_DEBUG_CACHE", None)
    result = subprocess.run(NOA + ["warmup", "--jobs", "2"], capture_output=True, text=True, env=env, timeout=1200)
    return result, cache


@pytest.mark.slow
def test_warmup_prints_one_line_per_unit_up_to_the_total(warmed):
    result, _ = warmed
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert re.fullmatch(r"kernels compiled and cached in \d+\.\d s", lines[-1]), lines[-1]
    steps = [STEP.match(line) for line in lines[:-1]]
    assert all(steps), lines
    total = len(units())
    assert [int(step[1]) for step in steps] == list(range(1, total + 1))
    assert {int(step[2]) for step in steps} == {total}
    assert sorted(Unit(step[3], step[4]) for step in steps) == sorted(units())


@pytest.mark.slow
def test_parallel_warmup_leaves_a_complete_cache(warmed, tmp_path):
    """After `noa warmup --jobs 2`, numba-path commands in a fresh process load every kernel they
    run from the cache and save none."""
    result, cache = warmed
    assert result.returncode == 0, result.stderr
    assert not list(Path(cache).rglob("*.tmp.*"))  # no temporary cache file left behind
    source = tmp_path / "in.mrc"
    write_mrc(source, np.arange(2 * 40 * 48, dtype=np.float32).reshape(2, 40, 48))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), NUMBA_DEBUG_CACHE="1", NOA_COMPUTE="numba", COLUMNS="200")
    # (not `noa bin` yet: its warm-up cases miss the kernel version a file written by mrcfile needs, with
    # the in-process warm-up as well)
    volume = tmp_path / "half.mrc"
    write_mrc(volume, np.random.default_rng(0).normal(size=(24, 24, 24)).astype(np.float32))
    bytes_tif = tmp_path / "bytes.tif"
    tifffile.imwrite(bytes_tif, np.arange(2 * 40 * 48, dtype=np.uint8).reshape(2, 40, 48))
    star_script = ("import sys, numpy as np; from noa_core.io import star; s = star.read(sys.argv[1]); "
                   "b = s.block('particles'); s.numbers(b, 'rlnDefocusU'); "
                   "star.write(sys.argv[2], s.edited({'particles': star.LoopEdit(rows=np.array([1, 0]))}))")
    table = tmp_path / "in.star"
    table.write_text("data_particles\n\nloop_\n_rlnImageName #1\n_rlnDefocusU #2\n1@a.mrcs 1.5\n2@a.mrcs 2.0\n")
    for args in (["copy", source, tmp_path / "out.mrc"],
                 ["copy", source, tmp_path / "out.tif", "--dtype", "int16", "--clamp"],
                 ["fsc", volume, volume], ["fsc", volume, volume, "--shells", "linear"], ["stats", bytes_tif],
                 [sys.executable, "-c", star_script, table, tmp_path / "out.star"]):
        command = [str(a) for a in args] if args[0] == sys.executable else NOA + [str(a) for a in args]
        run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        assert run.returncode == 0, run.stderr
        assert "data loaded" in run.stdout, run.stdout
        saved = [line for line in run.stdout.splitlines() if "data saved" in line or "index saved" in line]
        assert not saved, (args, saved)


def test_small_work_takes_numpys_path_until_the_cache_is_warm(monkeypatch, tmp_path):
    """A service on an empty cache loads numba at once, but its small files must not wait for a kernel to compile
    (2 s for the statistics): until the warm-up's mark is in the cache folder, they are NumPy's."""
    monkeypatch.delenv(compute_path.ENVIRONMENT, raising=False)
    monkeypatch.setattr(warmup_module.runtime, "cache_folder", lambda: tmp_path)
    monkeypatch.setattr(warmup_module, "installation_key", lambda: "these-sources")
    clock = [100.0]
    monkeypatch.setattr(warmup_module.time, "monotonic", lambda: clock[0])
    ready = warmup_module.warmed_lately(interval_s=1.0)
    compute_path.kernels_ready_when(ready)
    try:
        assert "numba" in sys.modules  # as in a service: numba is loaded
        assert compute_path.choose(1) == "numpy" and compute_path.choose(compute_path.SMALL_BYTES) == "numba"
        (tmp_path / "noa-warmup-these-sources.done").write_text("noa\n")
        assert compute_path.choose(1) == "numpy"  # looked up at most once a second
        clock[0] += 1.0
        assert compute_path.choose(1) == "numba"
        (tmp_path / "noa-warmup-these-sources.done").unlink()
        clock[0] += 5.0
        assert compute_path.choose(1) == "numba"  # once warm, for good
    finally:
        compute_path.kernels_ready_when(None)
    assert compute_path.choose(1) == "numba"


def test_a_service_warming_up_answers_small_files_without_compiling(monkeypatch, tmp_path):
    """While the service's warm-up runs (held here), a small file's statistics over HTTP are computed by NumPy,
    right (against NumPy), and the choice ends with the service."""
    monkeypatch.delenv(compute_path.ENVIRONMENT, raising=False)
    monkeypatch.setattr(warmup_module.runtime, "cache_folder", lambda: tmp_path / "cache")
    release = threading.Event()
    monkeypatch.setattr(service_module, "warmup_once", lambda stop: release.wait(30) and "compiled")
    paths = []
    real_for_size = compute_path.for_size

    def spy(nbytes, what=""):
        paths.append(compute_path.choose(nbytes))
        return real_for_size(nbytes, what)

    monkeypatch.setattr(compute_path, "for_size", spy)
    root = tmp_path / "root"
    root.mkdir()
    data = np.random.default_rng(3).normal(size=(3, 16, 16)).astype(np.float32)
    write_mrc(root / "small.mrc", data)
    (tmp_path / "tmp").mkdir()
    try:
        with TestClient(create_app(Settings(data_root=root, tmp_dir=tmp_path / "tmp", warmup=True))) as client:
            answer = client.post("/v1/paths/stats", json={"path": "small.mrc"})
            assert answer.status_code == 200, answer.text
            assert answer.json()["mean"] == pytest.approx(float(data.mean(dtype=np.float64)), rel=1e-6)
            assert paths and set(paths) == {"numpy"}
            release.set()
    finally:
        release.set()
    assert compute_path.choose(1) == "numba"  # the service stopped: numba's path again
