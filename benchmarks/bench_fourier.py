"""Benchmark noa's Fourier and geometry functions against scipy and NumPy, side by side, in one run.

Rows (each pair runs in turns, round after round, on the same data; a ratio is yardstick time over
noa time, the median of the ratios taken within each round, so > 1 means noa is faster):

- transform_2d: ``noa.geometry.transform_2d`` of a (N, 1, S, S) float32 stack (rotation + shift,
  linear, zero border) against ``scipy.ndimage.affine_transform`` image by image (order=1,
  mode='grid-constant': the same values). Goal >= 4x on 2 cores.
- rfft: ``noa.fft.rfft`` of the same stack against ``scipy.fft.rfft2(workers=W)``, W the numba
  thread count. Goal >= 0.9x (noa adds no overhead).
- rescale: ``noa.rescale(volume, 0.5)`` of a V^3 float32 volume (V = 640: 1 GiB) against a NumPy
  script (``numpy.fft.rfftn``, crop, ``irfftn``, scale).

Each row first checks that both sides agree. Usage:

    python benchmarks/bench_fourier.py                      # the full sizes: 64 x 1024^2 and 640^3
    python benchmarks/bench_fourier.py --size 256 --count 8 --volume 128 --repeat 3   # a quick check
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numba
import numpy as np
import scipy.fft
from scipy import ndimage

import noa_core as noa
from noa_core.fourier import fft, resampling
from noa_core.geometry import transforms


def paired(noa_call: Callable[[], object], yardstick: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    """Median seconds of each side and the median of the per-round ratios (yardstick / noa)."""
    noa_call(), yardstick()  # warm-up: compilation, first-touch page faults
    ours, theirs, ratios = [], [], []
    for _ in range(repeat):
        t = time.perf_counter()
        noa_call()
        a = time.perf_counter() - t
        t = time.perf_counter()
        yardstick()
        b = time.perf_counter() - t
        ours.append(a)
        theirs.append(b)
        ratios.append(b / a)
    return statistics.median(ours), statistics.median(theirs), statistics.median(ratios)


def row(name: str, yardstick: str, result: tuple[float, float, float], goal: float | None) -> None:
    ours, theirs, ratio = result
    verdict = "" if goal is None else f"  (goal >= {goal:.1f}x: {'met' if ratio >= goal else 'NOT met'})"
    print(f"{name:<14} noa {ours * 1e3:10.1f} ms   {yardstick:<34} {theirs * 1e3:10.1f} ms   "
          f"ratio {ratio:6.2f}x{verdict}")


def numpy_rescale(volume: np.ndarray, new: int) -> np.ndarray:
    """The NumPy script: rfftn, keep the frequencies of the new (odd-free, even) size, irfftn, scale.
    For an even new size the Nyquist planes are folded as noa does (scipy.signal.resample's rule)."""
    n = volume.shape[0]
    spectrum = np.fft.rfftn(volume)
    h = new // 2
    keep = np.r_[0:h, n - h:n]
    cropped = spectrum[keep][:, keep][:, :, :h + 1]
    cropped[h] += spectrum[h][keep][:, :h + 1]  # fold +n/2 onto -n/2 (both axes kept whole)
    cropped[:, h] += spectrum[keep][:, h, :h + 1]
    cropped[h, h] += spectrum[h, h, :h + 1]
    cropped[:, :, h] *= 2.0
    return (np.fft.irfftn(cropped, s=(new, new, new), axes=(0, 1, 2)) * (new / n) ** 3).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="image edge S (default 1024)")
    parser.add_argument("--count", type=int, default=64, help="images N in the stack (default 64)")
    parser.add_argument("--volume", type=int, default=640, help="volume edge V, even (default 640: 1 GiB)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds per row (default 5)")
    args = parser.parse_args()
    threads = numba.get_num_threads()
    print(f"numba threads {threads}; stack ({args.count}, 1, {args.size}, {args.size}) float32; "
          f"volume {args.volume}^3 float32 ({args.volume ** 3 * 4 / 2**30:.2f} GiB)")

    rng = np.random.default_rng(0)
    stack = rng.normal(size=(args.count, 1, args.size, args.size)).astype(np.float32)
    matrices = np.stack([transforms.affine_2d(stack.shape, rotate=a, shift=(3.5, -2.25))
                         for a in np.linspace(-60, 60, args.count)])
    out = noa.zeros(stack.shape)
    reference = np.empty((args.count, args.size, args.size), np.float32)

    def noa_transform() -> None:
        transforms.transform_2d(stack, out, matrices, "linear", "zero")

    def scipy_transform() -> None:
        for b in range(args.count):
            ndimage.affine_transform(stack[b, 0], matrices[b, :2, :2], offset=matrices[b, :2, 2], order=1,
                                     mode="grid-constant", output=reference[b])

    noa_transform(), scipy_transform()
    assert np.allclose(out.numpy()[:, 0], reference, atol=1e-4), "transform_2d differs from scipy"
    row("transform_2d", "scipy.ndimage.affine_transform", paired(noa_transform, scipy_transform, args.repeat), 4.0)

    assert np.allclose(fft.rfft(stack).numpy(), scipy.fft.rfft2(stack, workers=threads), rtol=1e-3, atol=1e-2)
    row("rfft", f"scipy.fft.rfft2(workers={threads})",
        paired(lambda: fft.rfft(stack), lambda: scipy.fft.rfft2(stack, workers=threads), args.repeat), 0.9)
    stack = out = reference = None  # freed for the next case (rebound, not deleted: the timed closures name them)

    volume = rng.normal(size=(args.volume,) * 3).astype(np.float32)
    new = resampling.rescaled_sizes([args.volume], 0.5)[0]
    ours = noa.rescale(volume[None], 0.5).numpy()[0]
    assert ours.shape == (new,) * 3 and np.allclose(ours, numpy_rescale(volume, new), atol=1e-4), "rescale differs"
    del ours
    row("rescale 0.5", "NumPy rfftn / crop / irfftn",
        paired(lambda: noa.rescale(volume[None], 0.5), lambda: numpy_rescale(volume, new), max(1, args.repeat // 2)),
        None)


if __name__ == "__main__":
    main()
