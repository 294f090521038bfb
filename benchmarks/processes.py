"""What the file benchmarks share: a command timed as a process, with its peak resident memory, and
test volumes written by a child process.

A child writes the volume so that the benchmark's own pages do not inflate the peak RSS reported for
the commands it starts afterwards (a forked child's peak starts from its parent's resident size).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

MAKE_VOLUME = """
import sys, mrcfile, numpy as np
shape = tuple(int(n) for n in sys.argv[2].split(","))
with mrcfile.new_mmap(sys.argv[1], shape, mrc_mode=2, overwrite=True) as f:
    block = np.random.default_rng(0).normal(0, 1, shape[1:]).astype(np.float32)
    for z in range(shape[0]):
        f.data[z] = block + z
    f.voxel_size = 1.5
"""


def run(command: list[str] | str, outputs: Sequence[Path] = ()) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one command, which must succeed; ``outputs`` are removed first
    (untimed), so that every command writes to a path that does not exist."""
    for path in outputs:
        if path.is_dir():  # an OME-Zarr store
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    start = time.perf_counter()
    proc = subprocess.Popen(command, shell=isinstance(command, str), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    errors = proc.stderr.read().decode()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed ({os.waitstatus_to_exitcode(status)}): {command}\n{errors[-800:]}")
    return elapsed, usage.ru_maxrss / 1024


def make_volume(path: Path, shape: Sequence[int]) -> None:
    """A float32 MRC volume (D, H, W), pixel size 1.5 Å, written section by section in a child process."""
    subprocess.run([sys.executable, "-c", MAKE_VOLUME, str(path), ",".join(map(str, shape))], check=True)
