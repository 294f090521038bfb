"""Signals: SIGTERM (how Slurm, Kubernetes and Docker cancel) stops noa as SIGINT does, leaving nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mrcfile
import numpy as np
import pytest

from helpers import NOA, write_mrc

SECTIONS, SIDE = 96, 1024  # 384 MiB of float32, mostly holes: made at once, written for a second or more


@pytest.fixture(scope="module")
def big_map(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("big") / "in.mrc"
    mrcfile.new_mmap(str(path), (SECTIONS, SIDE, SIDE), mrc_mode=2, fill=None).close()
    return path


def _temporaries(folder: Path) -> list[Path]:
    return list(folder.glob(".*.noa-tmp"))


def _terminate_while_writing(args: list[str], folder: Path,
                             timeout_s: float = 60.0) -> subprocess.CompletedProcess | None:
    """Run noa, send SIGTERM once its temporary output exists; None when it finished first."""
    process = subprocess.Popen(NOA + args, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout_s
    try:
        while not _temporaries(folder):
            if process.poll() is not None or time.monotonic() > deadline:
                process.communicate(timeout=timeout_s)
                return None
            time.sleep(0.002)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=timeout_s)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _dask() -> list:
    try:
        import distributed  # noqa: F401
    except ImportError:
        return [pytest.mark.skip(reason="the dask extra is not installed")]
    return []


@pytest.mark.parametrize("args, attempts", [
    (["copy", "--order", "F"], 4), (["permute", "--axes", "0,1,3,2"], 4),
    # Dask: the split tasks are cancelled and the local cluster closed before noa exits.
    pytest.param(["copy", "--order", "F", "--scheduler", "local", "--workers", "2"], 2, marks=_dask()),
], ids=["copy", "permute", "dask"])
def test_sigterm_removes_the_temporary_output(big_map, tmp_path, args, attempts):
    terminated, needed = 0, (attempts + 1) // 2
    for attempt in range(attempts):
        folder = tmp_path / str(attempt)
        folder.mkdir()
        result = _terminate_while_writing([args[0], str(big_map), "out.mrc", *args[1:]], folder)
        if result is None or (result.returncode == 0 and sorted(os.listdir(folder)) == ["out.mrc"]):
            # it finished before the temporary file was seen, or the signal came once the output had its name
            # (a command whose outputs are all placed has succeeded): nothing to test this time
            continue
        terminated += 1
        assert result.returncode == 128 + signal.SIGTERM, (result.returncode, result.stderr)
        assert result.stderr.splitlines() == ["noa: error: terminated"], result.stderr
        assert sorted(os.listdir(folder)) == []
        if terminated == needed:
            break
    assert terminated >= needed


# -- a signal at an exact moment: the moment is made by the test, in a noa process of its own ----------------

def _noa_with(setup: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`noa ARGS` run by a Python process that first runs ``setup`` (which may arrange a signal at a moment)."""
    program = f"import os, signal, sys\n{setup}\nfrom noa_cli.main import run\nsys.argv[1:] = {args!r}\nrun()\n"
    return subprocess.run([sys.executable, "-c", program], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_sigterm_while_numpy_initialises_is_one_line(tmp_path):
    """Issue 38 item 7: a SIGTERM that lands inside NumPy's import (here: while its C core initialises, made
    certain by an import hook) exited 1 with a 70-line traceback, as the clean-up imported NumPy again."""
    write_mrc(tmp_path / "in.mrc", np.zeros((4, 5, 6), np.float32))
    setup = """
class Interrupting:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy.dtypes":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)
        return None
sys.meta_path.insert(0, Interrupting())
"""
    result = _noa_with(setup, ["stats", "in.mrc"], tmp_path)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert result.stderr.splitlines() == ["noa: error: terminated"], result.stderr


@pytest.mark.parametrize("moment", ["before", "after"])
def test_sigterm_around_the_output_taking_its_name(tmp_path, moment):
    """Issue 38 item 8: once the output is placed the command has succeeded (exit 0, its line printed),
    whatever the tidying up after it; a signal just before the placement leaves nothing (exit 143)."""
    write_mrc(tmp_path / "in.mrc", np.arange(120, dtype=np.float32).reshape(4, 5, 6))
    setup = f"""
from noa_core.io import atomic
commit = atomic.TemporaryOutput.commit
def commit_and_signal(self):
    if {moment!r} == "before":
        os.kill(os.getpid(), signal.SIGTERM)
    commit(self)
    if {moment!r} == "after":
        os.kill(os.getpid(), signal.SIGTERM)
atomic.TemporaryOutput.commit = commit_and_signal
"""
    result = _noa_with(setup, ["copy", "in.mrc", "out.mrc"], tmp_path)
    if moment == "after":
        assert result.returncode == 0, result.stderr
        assert result.stderr.splitlines() == ["wrote out.mrc"], result.stderr
        assert mrcfile.read(tmp_path / "out.mrc").shape == (4, 5, 6)
    else:
        assert result.returncode == 128 + signal.SIGTERM, result.stderr
        assert result.stderr.splitlines() == ["noa: error: terminated"], result.stderr
        assert sorted(os.listdir(tmp_path)) == ["in.mrc"]


def test_sigterm_while_the_interpreter_ends_after_success(tmp_path):
    """Issue 38 item 8: the process died of the signal (-15) beside a finished output when SIGTERM came
    while Python was ending (joining threads, finalizers)."""
    write_mrc(tmp_path / "in.mrc", np.zeros((4, 5, 6), np.float32))
    setup = "import atexit\natexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM))"
    result = _noa_with(setup, ["copy", "in.mrc", "out.mrc"], tmp_path)
    assert result.returncode == 0, (result.returncode, result.stderr)
    assert result.stderr.splitlines() == ["wrote out.mrc"]
