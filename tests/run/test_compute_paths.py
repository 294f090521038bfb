"""Small files are computed with NumPy, large ones with the numba kernels (noa_core.compute.compute_path): both
paths give the same bytes, for every operation (with the option sets its declaration lists for warm-up)
and every element type files hold; the NumPy path imports no numba; the threshold, the override and the
--debug line say which path ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import noa_core as nc
from helpers import REPO, assert_same_file, noa, write_mrc
from noa_core import io, operations
from noa_core.compute import compute_path
from noa_core.compute.conversion import CONVERSION_MODES, convert_into
from noa_core.compute.moments import block_moments
from noa_core.errors import NoaError
from noa_core.run import local

FILE_DTYPES = ("int8", "uint8", "int16", "uint16", "float16", "float32", "int32", "float64", "complex64")
SHAPE = (2, 3, 17, 20)


def source(folder, dtype: str):
    """A small file of ``dtype`` with negative, zero and large values (MRC where MRC holds the type)."""
    rng = np.random.default_rng(7)
    values = rng.normal(0, 40, SHAPE)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.normal(0, 40, SHAPE)
    if np.dtype(dtype).kind == "u":
        values = np.abs(values)
    values.reshape(-1)[:5] = 0
    suffix = ".mrc" if dtype in io.mrc.WRITABLE_DTYPES else ".tif"
    path = folder / f"in-{dtype}{suffix}"
    io.write(path, nc.asarray(values.astype(dtype)), overwrite=True)
    return path


def outcome(run):
    """What ``run()`` gives, or the one-line error a user would see (both paths must refuse alike)."""
    try:
        return run()
    except NoaError as exc:
        return f"{type(exc).__name__}: {exc}"


def cases():
    for operation in operations.operations():
        if operation.warmup is None or operation.changes_input:
            continue
        for dtype in FILE_DTYPES:
            for case_dtype, options in operation.warmup(dtype, SHAPE):
                if case_dtype == dtype:
                    yield operation.name, dtype, options


CASES = list(cases())


@pytest.mark.parametrize("name, dtype, options", CASES, ids=[f"{n}-{d}-{json.dumps(o, sort_keys=True)}"
                                                            for n, d, o in CASES])
def test_both_paths_write_the_same_bytes(tmp_path, monkeypatch, name, dtype, options):
    operation = operations.get(name)
    src = source(tmp_path, dtype)
    written = {}
    for path in ("numpy", "numba"):
        monkeypatch.setenv(compute_path.ENVIRONMENT, path)
        if operation.writes == "file":
            out = tmp_path / path / f"out{'.mrc' if options.get('dtype', dtype) in io.mrc.WRITABLE_DTYPES else '.tif'}"
            out.parent.mkdir()
            written[path] = outcome(lambda: (local.write(operation.task(options), src, out), out)[1])
        elif operation.writes == "folder":
            out = tmp_path / path
            written[path] = outcome(lambda: local.write_several(operation.task(options), src, out)[0])
        else:
            inputs = [src] * operation.max_inputs if operation.max_inputs > 1 else src  # fsc: halves and mask
            written[path] = outcome(lambda: operation.describe(inputs, options))
    ours, theirs = written["numpy"], written["numba"]
    if isinstance(ours, (str, dict)):  # an error, or a report: the same words and numbers
        assert ours == theirs
    elif isinstance(ours, list):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert_same_file(a, b)
    else:
        assert_same_file(ours, theirs)


DTYPES = st.sampled_from(FILE_DTYPES + ("float64", "uint32", "int64", "complex128", "bool"))


@st.composite
def arrays(draw):
    """An Array of a file type, laid out C, F, permuted, sliced or broadcast, with zeros of both signs,
    infinities and NaN among normal values."""
    dtype = np.dtype(draw(DTYPES))
    shape = tuple(draw(st.lists(st.integers(1, 40), min_size=4, max_size=4)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    values = rng.normal(0, 1000, shape)
    if dtype.kind == "c":
        values = values + 1j * rng.normal(0, 1000, shape)
    if dtype.kind in "fc":
        special = draw(st.lists(st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan, 1e300]), max_size=4))
        for value in special:
            values.reshape(-1)[rng.integers(0, values.size)] = value
    with np.errstate(all="ignore"):
        data = values.astype(dtype)
    array = nc.asarray(data)
    view = draw(st.sampled_from(["c", "permuted", "sliced", "broadcast"]))
    if view == "permuted":
        array = array.permute((0, 2, 3, 1))
    elif view == "sliced":
        array = array[:, :, ::2, 1:]
    elif view == "broadcast":
        array = array[:1].broadcast((3, *array.shape[1:]))
    return array


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(array=arrays())
def test_moments_are_the_same_bits_on_both_paths(array):
    if array.size == 0:
        return
    kernels = block_moments(array)
    with compute_path.using("numpy"):
        numpy = block_moments(array)
    assert repr(numpy) == repr(kernels)


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(array=arrays(), target=DTYPES, mode=st.sampled_from(CONVERSION_MODES))
def test_conversions_are_the_same_bits_on_both_paths(array, target, mode):
    note(f"{array.dtype} {array.shape} {array.strides} -> {target} ({mode}): {array.numpy().reshape(-1)[:50]!r}")
    results = []
    for path in ("numba", "numpy"):
        out = nc.empty(array.shape, target)
        with compute_path.using(path):
            results.append(outcome(lambda: convert_into(array, out, mode=mode).numpy().tobytes()))
    if mode == "cast" and array.dtype.kind in "fc" and np.dtype(target).kind in "iub":
        return  # out-of-range floats to integers are undefined in C, NumPy and numba alike
    assert results[0] == results[1]


def test_small_work_imports_no_numba(tmp_path):
    """Each small command a pipeline runs per file leaves numba, scipy.fft and pandas unimported (the start-up they
    cost: 0.3-0.4 s, 0.2-0.3 s and 0.3 s; pandas comes with the mdoc reader, which a stack without an mdoc beside it
    never needs), and the modules that read a tilt series' side files where no file is beside the stack (12 ms)."""
    src = tmp_path / "small.mrc"
    write_mrc(src, np.random.default_rng(0).normal(size=(3, 64, 64)).astype(np.float32))
    commands = [["stats", src], ["info", src], ["copy", src, tmp_path / "c.mrc"], ["permute", src, tmp_path / "p.mrc",
                "--axes", "0,1,3,2"], ["flip", src, tmp_path / "f.mrc", "--axis", "x"], ["bin", src, tmp_path / "b.mrc",
                "--factor", "2"], ["sections", src, tmp_path / "s.mrc", "--keep", "0,2"],
                ["header", src, "--pixel-size", "1.5"], ["scale", src, tmp_path / "u.mrc", "--to-range", "0,255",
                "--dtype", "uint8"], ["normalize", src, tmp_path / "n.mrc"],
                ["filter", src, tmp_path / "l.mrc", "--lowpass", "8", "--angpix", "1"],
                ["powerspectrum", src, tmp_path / "w.mrc"], ["rescale", src, tmp_path / "r.mrc", "--factor", "0.5"]]
    probe = ("import sys; from noa_cli.main import run\n"
             "try:\n    run(sys.argv[1:])\nexcept SystemExit as exit:\n    assert exit.code == 0, exit.code\n"
             "assert 'numba' not in sys.modules, 'numba imported'\n"
             "assert 'scipy.fft' not in sys.modules, 'scipy.fft imported'\n"
             "assert 'pandas' not in sys.modules, 'pandas imported'\n"
             "assert 'noa_core.tomography.sidefiles' not in sys.modules, 'side files read'\n")
    for command in commands:
        result = subprocess.run([sys.executable, "-c", probe, *map(str, command)], capture_output=True, text=True,
                                cwd=REPO, timeout=120)
        assert result.returncode == 0, (command, result.stderr[-2000:])


def test_the_threshold_chooses_and_debug_says_so(tmp_path):
    src = tmp_path / "small.mrc"
    write_mrc(src, np.zeros((2, 8, 8), np.float32))
    choices = ("from noa_core.compute import compute_path as c\n"
               "print(c.choose(c.SMALL_BYTES - 1), c.choose(c.SMALL_BYTES), c.choose(None))\n"
               "import numba\n"
               "print(c.choose(1))\n")
    fresh = subprocess.run([sys.executable, "-c", choices], capture_output=True, text=True, cwd=REPO, timeout=120,
                           env={k: v for k, v in os.environ.items() if k != compute_path.ENVIRONMENT})
    assert fresh.returncode == 0, fresh.stderr
    # small, at the threshold, unknown (a store); then in a process that has loaded numba, even 1 byte
    assert fresh.stdout.split() == ["numpy", "numba", "numba", "numba"]
    small = noa("--debug", "copy", src, tmp_path / "a.mrc")
    assert small.returncode == 0, small.stderr
    assert "compute path numpy" in small.stderr and "threshold" in small.stderr
    forced = noa("--debug", "copy", src, tmp_path / "b.mrc", env={compute_path.ENVIRONMENT: "numba"})
    assert forced.returncode == 0, forced.stderr
    assert "compute path numba" in forced.stderr and "NOA_COMPUTE=numba" in forced.stderr
    quiet = noa("copy", src, tmp_path / "c.mrc")
    assert "compute path" not in quiet.stderr  # only with --debug
    assert_same_file(tmp_path / "a.mrc", tmp_path / "b.mrc")
