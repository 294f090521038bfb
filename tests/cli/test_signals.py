"""Signals: SIGTERM (how Slurm, Kubernetes and Docker cancel) stops noa as SIGINT does, leaving nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import mrcfile
import pytest
from helpers import NOA

SECTIONS, SIDE = 96, 1024  # 384 MiB of float32, mostly holes: made at once, written for a second or more


@pytest.fixture(scope="module")
def big_map(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("big") / "in.mrc"
    mrcfile.new_mmap(str(path), (SECTIONS, SIDE, SIDE), mrc_mode=2, fill=None).close()
    return path


def _temporaries(folder: Path) -> list[Path]:
    return list(folder.glob(".*.noa-tmp"))


def _terminate_while_writing(args: list[str], folder: Path, timeout_s: float = 60.0) -> subprocess.CompletedProcess | None:
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
    pytest.param(["copy", "--order", "F", "--scheduler", "local", "--workers", "2"], 1, marks=_dask()),
], ids=["copy", "permute", "dask"])
def test_sigterm_removes_the_temporary_output(big_map, tmp_path, args, attempts):
    terminated = 0
    for attempt in range(attempts):
        folder = tmp_path / str(attempt)
        folder.mkdir()
        result = _terminate_while_writing([args[0], str(big_map), "out.mrc", *args[1:]], folder)
        if result is None:  # it finished before the temporary file was seen: nothing to test this time
            continue
        terminated += 1
        assert result.returncode == 128 + signal.SIGTERM, (result.returncode, result.stderr)
        assert result.stderr.splitlines() == ["noa: error: terminated"], result.stderr
        assert sorted(os.listdir(folder)) == []
    assert terminated >= (attempts + 1) // 2
