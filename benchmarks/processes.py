"""What the file benchmarks share: a command timed as a process, with its peak resident memory, and
test volumes written by a child process.

A child writes the volume so that the benchmark's own pages do not inflate the peak RSS reported for
the commands it starts afterwards (a forked child's peak starts from its parent's resident size).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

MAKE_VOLUME = """
import sys, mrcfile, numpy as np
shape = tuple(int(n) for n in sys.argv[2].split(","))
varied = sys.argv[3] == "varied"
with mrcfile.new_mmap(sys.argv[1], shape, mrc_mode=2, overwrite=True) as f:
    if sys.argv[4] == "stack":
        f.set_image_stack()
    rng = np.random.default_rng(0)
    block = None if varied else rng.normal(0, 1, shape[1:]).astype(np.float32)
    for z in range(shape[0]):
        f.data[z] = rng.normal(z, 1 + z % 3, shape[1:]).astype(np.float32) if varied else block + z
    f.voxel_size = sys.argv[5]
"""


def run(command: list[str] | str, outputs: Sequence[Path] = (), cwd: Path | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one command run in ``cwd``, which must succeed; ``outputs`` are removed
    first (untimed), so that every command writes to a path that does not exist."""
    for path in outputs:
        if path.is_dir():  # an OME-Zarr store
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    start = time.perf_counter()
    proc = subprocess.Popen(command, shell=isinstance(command, str), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=cwd)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    errors = proc.stderr.read().decode()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed ({os.waitstatus_to_exitcode(status)}): {command}\n{errors[-800:]}")
    return elapsed, usage.ru_maxrss / 1024


def in_turns(tools: dict[str, list[str]], rounds: int, cwd: Path,
             outputs: dict[str, Sequence[Path]] | None = None) -> tuple[dict[str, float], dict[str, float]]:
    """Each tool's median wall seconds and highest peak RSS (MiB) over ``rounds`` rounds, each round running every
    tool once, in turns, in ``cwd``; printed one line each. A tool's ``outputs`` (absolute paths) are removed,
    untimed, before each of its runs."""
    times: dict[str, list[float]] = {name: [] for name in tools}
    rss: dict[str, float] = {name: 0.0 for name in tools}
    for _ in range(rounds):
        for name, command in tools.items():
            seconds, peak = run(command, (outputs or {}).get(name, ()), cwd=cwd)
            times[name].append(seconds)
            rss[name] = max(rss[name], peak)
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, median in medians.items():
        print(f"  {name:9s} {median:8.3f} s ({min(times[name]):.3f}-{max(times[name]):.3f})   "
              f"peak RSS {rss[name]:8.1f} MiB")
    return medians, rss


def make_volume(path: Path, shape: Sequence[int], *, varied: bool = False, stack: bool = False,
                pixel_size: float = 1.5) -> None:
    """A float32 MRC volume (D, H, W; or an image ``stack``), written section by section in a child process:
    one normal block plus the section number, or each section drawn anew with its own mean and spread
    (``varied``: what percentiles and per-section statistics see)."""
    subprocess.run([sys.executable, "-c", MAKE_VOLUME, str(path), ",".join(map(str, shape)),
                    "varied" if varied else "same", "stack" if stack else "volume", str(pixel_size)], check=True)


PARTICLE_MAP = """
import sys, mrcfile, numpy as np
from scipy import ndimage
n = int(sys.argv[2])
rng = np.random.default_rng(0)
atoms = rng.normal(size=(300, 3))
atoms *= (rng.uniform(size=(300, 1)) ** (1 / 3) * 0.3 * n / np.linalg.norm(atoms, axis=1, keepdims=True))
density = np.zeros((n, n, n), np.float32)
np.add.at(density, tuple((atoms + n // 2).astype(int).T), 1.0)
density = ndimage.gaussian_filter(density, n / 32)
density /= density.max()
density += rng.normal(0, 0.01, density.shape).astype(np.float32)
with mrcfile.new(sys.argv[1], density, overwrite=True) as f:
    f.voxel_size = 1.2
"""


def make_particle_map(path: Path, n: int) -> None:
    """A particle-like n^3 float32 map (300 points blurred to blobs, peak 1, noise of sd 0.01; 1.2 Å pixels),
    written in a child process: the benchmark's own pages stay out of the peaks of the commands it starts. The
    map tools' benchmarks (mask, symmetrize) use it; 0.2 is a threshold that takes the particle."""
    subprocess.run([sys.executable, "-c", PARTICLE_MAP, str(path), str(n)], check=True)


Command = list[str] | str


@dataclass
class Paired:
    """Wall seconds and peak RSS (MiB) of a command and its yardstick over rounds run in turns."""

    times: list[float] = field(default_factory=list)
    yardsticks: list[float] = field(default_factory=list)
    peaks: list[float] = field(default_factory=list)
    yardstick_peaks: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """The median of the per-round ratios (command / yardstick: below 1 the command is faster)."""
        return statistics.median(t / y for t, y in zip(self.times, self.yardsticks))

    def columns(self, digits: int = 2) -> str:
        """Median seconds of both, the ratio, and the peaks of both (as the benchmarks print them)."""
        return (f"{statistics.median(self.times):>9.{digits}f}{statistics.median(self.yardsticks):>13.{digits}f}"
                f"{self.ratio:>8.2f}{max(self.peaks):>10.0f}{max(self.yardstick_peaks):>11.0f}")


def paired(command: Command | Callable[[], Command], yardstick: Command | Callable[[], Command], rounds: int,
           outputs: Sequence[Path] = (), warm: bool = True) -> Paired:
    """``command`` then ``yardstick``, ``rounds`` times in turns (each a list, a shell string or a function
    giving one), so both share the machine's noise; with ``warm``, ``command`` runs once untimed first
    (the page cache then holds the input, as in every timed round)."""
    def made(c):
        return c() if callable(c) else c

    if warm:
        run(made(command), outputs)
    result = Paired()
    for _ in range(rounds):
        t, rss = run(made(command), outputs)
        y, yrss = run(made(yardstick), outputs)
        result.times.append(t)
        result.yardsticks.append(y)
        result.peaks.append(rss)
        result.yardstick_peaks.append(yrss)
    return result
