"""noa_cli.report: how the ``noa`` process ends. Once its command has ended and no thread runs, it leaves without
tearing the interpreter down, its exit functions run and its streams flushed; a thread still running is waited for."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from helpers import load, write_mrc

# The ``noa`` process as its console script runs it, with an exit function and an object whose finalizer would
# speak when the interpreter is torn down (module globals are cleared then).
_PROCESS = """
import atexit, os, sys, threading, time
from noa_cli.main import run

class Finalized:
    def __del__(self):
        print("torn down", flush=True)

kept = Finalized()
atexit.register(lambda: print("exit functions ran"))
atexit.register(lambda: print("threads", len(os.listdir("/proc/self/task"))))
atexit.register(lambda: print("named", *sorted(t.name for t in threading.enumerate())))  # registered last: runs first
if sys.argv[1] == "thread":
    def late():  # still running when the command ends: a small file's stats took over 0.5 s in a loaded CI run
        time.sleep(3)
        print("the thread finished", flush=True)
    threading.Thread(target=late).start()
sys.argv = ["noa", *sys.argv[2:]]
run()
"""


def _noa_process(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _PROCESS, *args], capture_output=True, text=True, timeout=120,
                          env=None if env is None else {**os.environ, **env})


def test_a_finished_command_leaves_without_the_teardown(tmp_path):
    src = tmp_path / "small.mrc"
    data = write_mrc(src, np.arange(2 * 8 * 8, dtype=np.float32).reshape(2, 8, 8))
    done = _noa_process("alone", "stats", str(src))
    assert done.returncode == 0, done.stderr
    assert f"{data.max():g}" in done.stdout  # the report, flushed
    assert done.stdout.rstrip().endswith("exit functions ran")
    assert "torn down" not in done.stdout
    assert "threads 1\n" in done.stdout  # NumPy's BLAS started none (OPENBLAS_NUM_THREADS=1 for the process)


def test_the_kernels_idle_helper_threads_are_not_waited_for(tmp_path):
    """A file the kernels took on several threads (numba's path, past the serial threshold): their helper threads
    stay, idle, once the command is done; the process leaves without the teardown all the same."""
    from noa_core.kernels import runtime

    src = tmp_path / "large.mrc"
    side = 1 << ((runtime.SERIAL_THRESHOLD.bit_length() + 1) // 2)
    data = write_mrc(src, np.random.default_rng(0).random((side, side), dtype=np.float32))
    done = _noa_process("alone", "stats", str(src), env={"NOA_COMPUTE": "numba", "NUMBA_NUM_THREADS": "2"})
    assert done.returncode == 0, done.stderr
    assert f"{data.max():g}" in done.stdout
    assert done.stdout.rstrip().endswith("exit functions ran")
    assert "torn down" not in done.stdout


def test_the_idle_reading_threads_are_not_waited_for(tmp_path):
    """A transpose whose tiles gather rows from every slice reads them on several threads (past 4 MiB a tile):
    they stay, idle, once the command is done; the process leaves without the teardown (a quarter of a second for
    a 1 GiB `noa permute --axes 0,2,1,3` on tmpfs) all the same."""
    src, dst = tmp_path / "large.mrc", tmp_path / "out.mrc"
    data = write_mrc(src, np.random.default_rng(0).random((64, 256, 512), dtype=np.float32))
    done = _noa_process("alone", "permute", str(src), str(dst), "--axes", "0,2,1,3",
                        env={"NOA_COMPUTE": "numba", "NUMBA_NUM_THREADS": "2"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("exit functions ran")
    assert "torn down" not in done.stdout
    named = next(line for line in done.stdout.splitlines() if line.startswith("named ")).split()[1:]
    assert sum(name.startswith("noa-read") for name in named) >= 2  # the reading threads were there, idle
    np.testing.assert_array_equal(load(dst), data.transpose(1, 0, 2))


def test_a_failed_command_keeps_its_code_and_line(tmp_path):
    done = _noa_process("alone", "stats", str(tmp_path / "missing.mrc"))
    assert done.returncode == 2
    assert "missing.mrc" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "exit functions ran" in done.stdout and "torn down" not in done.stdout


def test_a_running_thread_is_waited_for(tmp_path):
    src = tmp_path / "small.mrc"
    write_mrc(src, np.zeros((2, 8, 8), np.float32))
    done = _noa_process("thread", "stats", str(src))
    assert done.returncode == 0, done.stderr
    assert "the thread finished" in done.stdout and "exit functions ran" in done.stdout
    assert "torn down" in done.stdout  # the interpreter's own exit, which joins the thread
