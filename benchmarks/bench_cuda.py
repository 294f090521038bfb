"""Benchmark noa's CUDA paths on a GPU: against the device-to-device copy, CuPy, and noa's own CPU path.

Float32; GPU times are medians of ``--repeat`` runs timed with CUDA events (CPU times: medians of
``--cpu-repeat`` wall-clock runs). Three tables:

1. copy and permute_copy: noa's bandwidth (bytes read plus written) as a fraction of a device-to-device copy
   of the same bytes, and CuPy's ``copy`` / ``ascontiguousarray(transpose)``. Goal >= 0.7x.
2. element-wise (a * 2 + 1, one fused kernel) and reductions (sum, mean, std, max) against CuPy. Goal >= 1x.
3. 256^3: filter (band-pass), rescale (Fourier crop to 192^3), FSC and symmetrize I1 on the GPU against noa's
   CPU path and against CuPy written the obvious way (cupy.fft; cupyx.scipy.ndimage.affine_transform per
   operator).

``--files DIR`` adds a fourth: `noa` file to file on a 1 GiB volume with --device cuda and cpu, against `dd`
of the same file (what the disk costs). Usage:

    python benchmarks/bench_cuda.py [--repeat N] [--files /tmp/bench]

Without a GPU it says so and exits with status 0 (nothing to measure).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--cpu-repeat", type=int, default=3)
    parser.add_argument("--files", type=Path, help="a folder for the file-to-file table (1 GiB inputs)")
    parser.add_argument("--tables", default="1,2,3", help="which tables, of 1,2,3,4 (4: with --files)")
    parser.add_argument("--small", action="store_true",
                        help="shapes 1/64 as long on each axis: checks the script itself (NUMBA_ENABLE_CUDASIM=1)")
    args = parser.parse_args()
    k = 64 if args.small else 1  # each size divided by k
    tables = set(args.tables.split(",")) | ({"4"} if args.files is not None else set())

    import noa_core as nc

    if not nc.cuda_available():
        print("no CUDA GPU found: nothing to measure")
        return
    import numba
    from numba import cuda

    try:
        import cupy
    except ImportError:
        cupy = None
    if not numba.config.ENABLE_CUDASIM:
        name = cuda.get_current_device().name
        driver = cuda.cudadrv.driver.driver.get_version()
        print(f"device: {name.decode() if isinstance(name, bytes) else name}; the driver's CUDA {driver}; "
              f"CuPy {cupy.__version__ if cupy else 'not installed'}")

    def gpu_ms(func: Callable[[], object]) -> float:
        func()  # compile, allocate
        cuda.synchronize()
        times = []
        for _ in range(args.repeat):
            start, stop = cuda.event(), cuda.event()
            start.record()
            func()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        return statistics.median(times)

    def cpu_ms(func: Callable[[], object]) -> float:
        func()
        times = []
        for _ in range(args.cpu_repeat):
            start = time.perf_counter()
            func()
            times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times)

    rng = np.random.default_rng(0)
    nan = float("nan")

    if "1" in tables:
        print("\n1. copies and transposes")
        print(f"{'operation':<30}{'shape':<22}{'noa ms':>9}{'d2d ms':>9}{'vs d2d':>9}{'cupy ms':>10}")
        cases = [("copy C->C", (16, 1, 4096 // k, 4096 // k), None), ("copy F->F", (16, 1, 4096 // k, 4096 // k), "F"),
                 ("permute_copy (0,1,3,2)", (1, 1, 16384 // k, 16384 // k), (0, 1, 3, 2)),
                 ("permute_copy (0,1,3,2)", (256 // k, 1, 1024 // k, 1024 // k), (0, 1, 3, 2)),
                 ("permute_copy (0,3,2,1)", (1, 512 // k, 512 // k, 512 // k), (0, 3, 2, 1))]
        for name, shape, how in cases:
            host = rng.random(shape, dtype=np.float32)
            a = nc.asarray(host).to("cuda")
            if how == "F":
                a = a.copy("F")
                noa_f = lambda: a.copy("F")  # noqa: E731
            elif how is None:
                noa_f = lambda: a.copy("C")  # noqa: E731
            else:
                noa_f = lambda: a.permute_copy(how)  # noqa: E731
            src = cuda.to_device(host.reshape(-1))
            dst = cuda.device_array_like(src)
            t_noa, t_d2d = gpu_ms(noa_f), gpu_ms(lambda: dst.copy_to_device(src))
            t_cupy = nan
            if cupy is not None:
                c = cupy.asarray(host)
                cupy_f = ((lambda: c.copy()) if how in (None, "F")
                          else (lambda: cupy.ascontiguousarray(c.transpose(how))))
                t_cupy = gpu_ms(cupy_f)
            print(f"{name:<30}{shape!s:<22}{t_noa:>9.2f}{t_d2d:>9.2f}{t_d2d / t_noa:>8.2f}x{t_cupy:>10.2f}")
            a = src = dst = c = None  # freed for the next case (rebound, not deleted: the timed closures name them)

    if "2" in tables:
        print(f"\n2. element-wise and reductions, (16, 1, {4096 // k}, {4096 // k}) float32")
        print(f"{'operation':<30}{'noa ms':>9}{'cupy ms':>10}{'cupy / noa':>12}")
        host = rng.random((16, 1, 4096 // k, 4096 // k), dtype=np.float32)
        a = nc.asarray(host).to("cuda")
        out = nc.empty(a.shape, "float32", device="cuda")
        c = cupy.asarray(host) if cupy is not None else None
        rows: list[tuple[str, Callable[[], object], Callable[[], object] | None]] = [
            ("ewise a * 2 + 1", lambda: nc.ewise([a], out, lambda v: v * np.float32(2) + np.float32(1)),
             (lambda: c * np.float32(2) + np.float32(1)) if c is not None else None),
            ("sum", lambda: nc.sum(a), (lambda: c.sum(dtype=cupy.float64)) if c is not None else None),
            ("mean", lambda: nc.mean(a), (lambda: c.mean(dtype=cupy.float64)) if c is not None else None),
            ("std", lambda: nc.std(a), (lambda: c.std(dtype=cupy.float64)) if c is not None else None),
            ("max", lambda: nc.max(a), (lambda: c.max()) if c is not None else None),
            ("sum over width (axes=3)", lambda: nc.sum(a, axes=3),
             (lambda: c.sum(axis=3, dtype=cupy.float64)) if c is not None else None)]
        for name, noa_f, cupy_f in rows:
            t_noa = gpu_ms(noa_f)
            t_cupy = gpu_ms(cupy_f) if cupy_f is not None else nan
            print(f"{name:<30}{t_noa:>9.2f}{t_cupy:>10.2f}{t_cupy / t_noa:>11.2f}x")
        np.testing.assert_allclose(float(nc.mean(a).to("cpu").numpy().ravel()[0]), host.astype(np.float64).mean(),
                                   rtol=1e-6)  # float64 sums; the mean of float32 values is float32
        a = out = c = None

    if "3" in tables:
        n, m = 256 // k, 192 // k  # the box, and the rescaled box
        print(f"\n3. {n}^3 float32: the GPU against noa's CPU path and CuPy")
        print(f"{'operation':<30}{'gpu ms':>9}{'cpu ms':>10}{'cpu / gpu':>11}{'cupy ms':>10}{'cupy / gpu':>12}")
        from noa_core.fourier import spectral
        from noa_core.geometry import symmetry

        vol = rng.standard_normal((1, n, n, n)).astype(np.float32)
        other = (vol + rng.standard_normal(vol.shape).astype(np.float32)).astype(np.float32)
        x_cpu, y_cpu = nc.asarray(vol), nc.asarray(other)
        x_gpu, y_gpu = x_cpu.to("cuda"), y_cpu.to("cuda")
        group = symmetry.point_group("I1")
        weights = spectral.bandpass_weights((n, n, n), 1.0, lowpass=8.0, highpass=40.0)
        cases3: list[tuple[str, Callable[[], object], Callable[[], object], Callable[[], object] | None]] = [
            ("filter (band-pass)",
             lambda: spectral.bandpass(x_gpu, lowpass=8.0, highpass=40.0, pixel_size=1.0, ndim=3),
             lambda: spectral.bandpass(x_cpu, lowpass=8.0, highpass=40.0, pixel_size=1.0, ndim=3), None),
            (f"rescale {n} -> {m}", lambda: nc.fourier_resize(x_gpu, (m, m, m), ndim=3),
             lambda: nc.fourier_resize(x_cpu, (m, m, m), ndim=3), None),
            ("fsc", lambda: nc.fsc(x_gpu, y_gpu), lambda: nc.fsc(x_cpu, y_cpu), None),
            ("symmetrize I1", lambda: symmetry.symmetrize(x_gpu, group),
             lambda: symmetry.symmetrize(x_cpu, group), None),
        ]
        if cupy is not None:
            import cupyx.scipy.ndimage as cndi

            cx, cy = cupy.asarray(vol[0]), cupy.asarray(other[0])
            cw = cupy.asarray(weights.astype(np.float32))

            def cupy_filter():
                return cupy.fft.irfftn(cupy.fft.rfftn(cx) * cw, s=cx.shape)

            def cupy_rescale():
                f = cupy.fft.fftshift(cupy.fft.fftn(cx))
                lo = (n - m) // 2
                return cupy.fft.ifftn(cupy.fft.ifftshift(f[lo:lo + m, lo:lo + m, lo:lo + m])).real * (m / n) ** 3

            f_freq = np.sqrt(sum(g ** 2 for g in np.meshgrid(np.fft.fftfreq(n), np.fft.fftfreq(n), np.fft.rfftfreq(n),
                                                              indexing="ij")))
            shells = cupy.asarray(np.minimum(np.rint(f_freq * n).astype(np.int64), n // 2 + 1).ravel())

            def cupy_fsc():
                f1, f2 = cupy.fft.rfftn(cx), cupy.fft.rfftn(cy)
                num = cupy.bincount(shells, weights=(f1 * f2.conj()).real.ravel())
                p1 = cupy.bincount(shells, weights=(cupy.abs(f1) ** 2).ravel())
                p2 = cupy.bincount(shells, weights=(cupy.abs(f2) ** 2).ravel())
                return (num / cupy.sqrt(p1 * p2)).get()

            centre = np.full(3, n // 2, np.float64)
            operators = [np.ascontiguousarray(r[::-1, ::-1]) for r in group.matrices]  # (x, y, z) ones, as (z, y, x)

            def cupy_symmetrize():
                total = cupy.zeros(cx.shape, cupy.float32)
                for r in operators:  # the output at p takes the input at R p
                    total += cndi.affine_transform(cx, cupy.asarray(r), offset=centre - r @ centre, order=1)
                return total / len(operators)

            cases3 = [(name, g, c_, cf) for (name, g, c_, _), cf in
                      zip(cases3, (cupy_filter, cupy_rescale, cupy_fsc, cupy_symmetrize))]
        else:  # noa's transforms on the GPU are cuFFT's, through CuPy
            print("(filter and rescale on the GPU need CuPy: left out)")
            cases3 = cases3[2:]
        for name, gpu_f, cpu_f, cupy_f in cases3:
            t_gpu, t_cpu = gpu_ms(gpu_f), cpu_ms(cpu_f)
            t_cupy = gpu_ms(cupy_f) if cupy_f is not None else nan
            print(f"{name:<30}{t_gpu:>9.2f}{t_cpu:>10.1f}{t_cpu / t_gpu:>10.1f}x{t_cupy:>10.2f}"
                  f"{t_cupy / t_gpu:>11.2f}x")
        gpu_sym = symmetry.symmetrize(x_gpu, group).to("cpu").numpy()
        cpu_sym = symmetry.symmetrize(x_cpu, group).numpy()
        print(f"symmetrize I1, GPU vs CPU: max |difference| {float(np.abs(gpu_sym - cpu_sym).max()):.3g} "
              f"(values up to {float(np.abs(cpu_sym).max()):.3g}); bit-identical: {np.array_equal(gpu_sym, cpu_sym)}")

    if "4" in tables:
        if args.files is None:
            parser.error("table 4 needs --files DIR")
        files(args.files, 645 // k)


def files(folder: Path, side: int) -> None:
    """`noa` on a ``side``^3 float32 MRC file (645: 1 GiB), --device cuda against --device cpu, and `dd` of it."""
    import mrcfile

    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "in.mrc"
    with mrcfile.new_mmap(src, (side, side, side), mrc_mode=2, overwrite=True) as mrc:
        rng = np.random.default_rng(1)
        for z in range(0, side, 64):
            mrc.data[z:z + 64] = rng.standard_normal((min(64, side - z), side, side)).astype(np.float32)
    noa = [str(Path(sys.executable).parent / "noa")] if (Path(sys.executable).parent / "noa").exists() else [
        sys.executable, "-c", "from noa_cli.main import run; run()"]

    def seconds(argv: list[str]) -> float:
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        return time.perf_counter() - start

    gib = src.stat().st_size / 2 ** 30
    print(f"\n4. file to file, {gib:.2f} GiB float32 MRC in {folder} (page cache warm; "
          "each the median of 3)")
    out = folder / "out.mrc"
    dd = statistics.median(seconds(["dd", f"if={src}", f"of={out}", "bs=16M", "status=none"]) for _ in range(3))
    print(f"{'command':<44}{'cuda s':>8}{'cpu s':>8}{'dd s':>7}{'cuda / cpu':>12}")
    lines = [("copy", ["copy", str(src), str(out)]), ("permute --axes 0,3,2,1", ["permute", str(src), str(out),
             "--axes", "0,3,2,1"]), ("ewise 'a * 2 - 1'", ["ewise", "a * 2 - 1", str(src), "-o", str(out)]),
             ("transform --euler 30,60,90", ["transform", str(src), str(out), "--euler", "30,60,90"]),
             ("symmetrize --sym C7", ["symmetrize", str(src), str(out), "--sym", "C7"]),
             ("stats", ["stats", str(src)])]
    for name, line in lines:
        times = {}
        for device in ("cuda", "cpu"):
            runs = []
            for _ in range(3):
                out.unlink(missing_ok=True)
                runs.append(seconds([*noa, *line, "--device", device]))
            times[device] = statistics.median(runs)
        print(f"{name:<44}{times['cuda']:>8.2f}{times['cpu']:>8.2f}{dd:>7.2f}{times['cpu'] / times['cuda']:>11.2f}x")
    print(f"(dd: {gib / dd:.2f} GiB/s)")
    out.unlink(missing_ok=True)
    src.unlink()


if __name__ == "__main__":
    main()
