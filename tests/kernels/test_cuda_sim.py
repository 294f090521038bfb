"""Run the CUDA kernel tests under numba's CUDA simulator, in their own process.

The simulator replaces numba.cuda process-wide (NUMBA_ENABLE_CUDASIM must be set before numba is
imported), so it cannot share a process with the CPU tests.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

SIM_TESTS = Path(__file__).resolve().parent / "cuda_sim"  # run by path, from the repository


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
def test_cuda_kernels_under_the_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    argv = [sys.executable, "-m", "pytest", str(SIM_TESTS.relative_to(REPO)), "-q", "-p", "no:cacheprovider"]
    result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    passed = re.search(r"(\d+) passed", result.stdout)
    assert passed and int(passed.group(1)) > 0, result.stdout[-2000:]
