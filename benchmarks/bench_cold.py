"""The first call: what a new installation (an empty kernel cache) costs against the same call warm.

Each case runs with ``NUMBA_CACHE_DIR`` pointing at an empty folder of its own (cold), then again on the cache
that run filled (warm), in the same run, so that the ratio and the difference share the machine's state:

- a small file (3 x 64 x 64 float32, under the NumPy-path size): ``noa stats``, ``noa bin``, ``noa filter``
  (goal: within 2 s of its warm time);
- a large file (160 x 512 x 512 float32, 160 MiB, over the NumPy-path size: the numba kernels): ``noa
  stats``, ``noa copy --order F`` (goal: within 10 s of its warm time);
- ``noa warmup`` on an empty cache (goal: under 60 s);
- a fresh ``noa serve`` (two processes, as by default) on an empty cache: from its start to the URL line, to
  the first correct answer (a stats of the small file over HTTP, checked against NumPy) and to ``/readyz``
  answering 200, then its first answer on the large file (goal: correct within 5 s of the URL line).

    python benchmarks/bench_cold.py [--skip-warmup] [--large 160,512,512]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from processes import make_volume

NOA = str(Path(sys.executable).parent / "noa")


def timed(argv: list[str], cache: Path) -> float:
    """Wall seconds of one command with the kernel cache at ``cache``; it must succeed."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{done.stderr[-1500:]}")
    return elapsed


def cold_and_warm(name: str, argv: list[str], folder: Path, goal: float) -> tuple[str, float, float]:
    cache = Path(tempfile.mkdtemp(prefix="cache-", dir=folder))
    cold = timed(argv, cache)
    warm = timed(argv, cache)
    verdict = "ok" if cold - warm <= goal else f"over the {goal:g} s goal"
    print(f"{name:34s} cold {cold:7.2f} s   warm {warm:6.2f} s   cost of the first call {cold - warm:6.2f} s"
          f" ({verdict})", flush=True)
    return name, cold, warm


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 120) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError:
        return 0, b""


def post(url: str, body: dict, timeout: float = 600) -> tuple[int, dict]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, json.loads(response.read())


def serve_cold(folder: Path, small: Path, large: Path, expected_mean: float) -> None:
    """A fresh service on an empty cache: the URL line, its first correct answer, readiness."""
    cache = Path(tempfile.mkdtemp(prefix="serve-cache-", dir=folder))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "NOA_WARMUP": "1"}
    start = time.perf_counter()
    proc = subprocess.Popen([NOA, "serve", "--data-root", str(folder), "--port", str(port), "--log-level", "warning"],
                            env=env, stderr=subprocess.PIPE, text=True)
    try:
        proc.stderr.readline()  # "noa serve: http://..." once every process accepts connections
        listening = time.perf_counter() - start
        status, result = post(f"{url}/v1/paths/stats", {"path": small.name})
        answered = time.perf_counter() - start
        if status != 200 or abs(result["mean"] - expected_mean) > 1e-4 * max(1.0, abs(expected_mean)):
            raise SystemExit(f"a wrong first answer: {status} {result}")
        while get(f"{url}/readyz", 5)[0] != 200:
            time.sleep(0.05)
        ready = time.perf_counter() - start
        status, _ = post(f"{url}/v1/paths/stats", {"path": large.name})
        large_answer = time.perf_counter() - start
        if status != 200:
            raise SystemExit(f"the large file's stats failed: {status}")
        print(f"{'noa serve, empty cache':34s} URL line {listening:.2f} s, first correct answer {answered:.2f} s "
              f"({answered - listening:.2f} s after the URL), ready {ready:.2f} s, a {large.stat().st_size >> 20} MiB "
              f"file's stats answered at {large_answer:.2f} s (the warm-up compiling beside it)", flush=True)
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-warmup", action="store_true", help="leave out noa warmup (minutes)")
    parser.add_argument("--large", default="160,512,512", help="the large volume's D,H,W")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="noa-cold-") as name:
        folder = Path(name)
        small, large = folder / "small.mrcs", folder / "large.mrc"
        make_volume(small, (3, 64, 64), stack=True)
        make_volume(large, tuple(int(n) for n in args.large.split(",")))
        import mrcfile

        expected_mean = float(mrcfile.read(small).astype("float64").mean())
        out = folder / "out.mrc"
        print(f"a {small.stat().st_size >> 10} KiB stack (NumPy path) and a {large.stat().st_size >> 20} MiB volume "
              "(numba kernels); each case cold (an empty NUMBA_CACHE_DIR), then warm", flush=True)
        for command, extra in (("stats", []), ("bin", ["--factor", "2"]), ("filter", ["--lowpass", "8"])):
            target = [str(out), "--force"] if command != "stats" else []
            cold_and_warm(f"noa {command} small", [NOA, command, str(small), *target, *extra], folder, 2.0)
        cold_and_warm("noa stats large", [NOA, "stats", str(large)], folder, 10.0)
        cold_and_warm("noa copy --order F large", [NOA, "copy", str(large), str(out), "--order", "F", "--force"],
                      folder, 10.0)
        if not args.skip_warmup:
            cache = Path(tempfile.mkdtemp(prefix="warmup-cache-", dir=folder))
            seconds = timed([NOA, "warmup", "--quiet"], cache)
            print(f"{'noa warmup, empty cache':34s} {seconds:.1f} s ({'ok' if seconds < 60 else 'over the 60 s goal'})",
                  flush=True)
        serve_cold(folder, small, large, expected_mean)


if __name__ == "__main__":
    main()
