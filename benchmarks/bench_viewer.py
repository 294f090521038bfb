"""Latency of the viewer (GET /v1/view/...) as one person at the page asks for pictures (issue 41 item 2).

A fresh ``noa serve`` (as the container starts it: default processes and workers) over a data root holding a
32 x 1024 x 1024 float32 volume of noise (the worst case for PNG: nothing to compress). One connection, as a
person's browser asks, and no ``If-None-Match``: every answer is computed. Each round visits every one of the 32
slices once (a new plane each time: the overview cache does not help across slices), for each workload:

- ``slice PNG``: ``/v1/view/image?size=1024`` (the whole 1024 x 1024 slice, sigma contrast, exact levels);
- ``slice JPEG``: the same with ``format=jpeg`` (quality 90);
- ``page: new slice``: what the page asks when the slice slider moves: the histogram (the plane's overview,
  computed: a cache miss) and then the 4 tiles of 256 x 256 at level 1 that fit its canvas, the tiles over 4
  connections at once as a browser fetches them; the time until the last tile is in;
- ``tile``: one 256 x 256 tile at level 0 (contrast from the cached overview).

The yardstick: the same 1024 x 1024 PNG made in this process the way a script would (mrcfile's memory map, NumPy's
mean and sd, RELION's level formula, Pillow's PNG at its default level): noa's p50 over the script's median is the
ratio. Goal: p99 below 50 ms for the slice. Figures are the median of 3 rounds, with the spread (min..max) of the
rounds.

    python benchmarks/bench_viewer.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import mrcfile
import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers import start_server, stop_server

KEY = "bench-key"
DEPTH, SIDE = 32, 1024
GOAL_P99_MS = 50.0


def make_volume(root: Path) -> Path:
    path = root / "slices.mrc"
    with mrcfile.new_mmap(path, (DEPTH, SIDE, SIDE), mrc_mode=2) as f:
        rng = np.random.default_rng(1)
        for z in range(DEPTH):
            f.data[z] = rng.normal(size=(SIDE, SIDE)).astype(np.float32)
    return path


def script_picture(path: Path, z: int) -> bytes:
    """The yardstick: the slice as a plain script makes its PNG."""
    with mrcfile.mmap(path, permissive=True) as f:
        values = np.asarray(f.data[z], dtype=np.float64)
    mean, sd = values.mean(), values.std(ddof=1)
    lo, hi = mean - 3 * sd, mean + 3 * sd
    levels = np.floor((np.clip(values, lo, hi) - lo) / ((hi - lo) / 255)).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(levels).save(out, format="PNG")
    return out.getvalue()


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1e3


def get(client: httpx.Client, url: str, params: dict) -> None:
    response = client.get(url, params=params)
    if response.status_code != 200:
        raise SystemExit(f"{url} {params}: {response.status_code} {response.text[:300]}")


def workloads(url: str, clients: list[httpx.Client], pool: ThreadPoolExecutor) -> dict:
    """name -> a function of the slice index that makes the requests and returns their latency in ms."""
    first = clients[0]
    plane = {"file": "slices.mrc", "axis": "z"}

    def page(z: int) -> float:
        def tiles() -> None:
            list(pool.map(lambda n: get(clients[n], f"{url}/v1/view/tile", {
                **plane, "index": z, "level": 1, "x": n % 2, "y": n // 2, "contrast": "range:-3,3"}), range(4)))

        return timed(lambda: (get(first, f"{url}/v1/view/histogram", {**plane, "index": z}), tiles()))

    return {
        "slice PNG": lambda z: timed(lambda: get(first, f"{url}/v1/view/image", {**plane, "index": z, "size": 1024})),
        "slice JPEG": lambda z: timed(lambda: get(first, f"{url}/v1/view/image", {
            **plane, "index": z, "size": 1024, "format": "jpeg"})),
        "page: new slice": page,
        "tile": lambda z: timed(lambda: get(first, f"{url}/v1/view/tile", {
            **plane, "index": 16, "level": 0, "x": z % 4, "y": z // 4 % 4})),
    }


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.1f} ({min(values):.1f}..{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "root"
        root.mkdir()
        volume = make_volume(root)
        script = []
        for _ in range(args.rounds):
            script.append(statistics.median(timed(lambda z=z: script_picture(volume, z)) for z in range(DEPTH)))
        proc, url = start_server(root, None, {"NOA_API_KEY": KEY, "NOA_TMP_DIR": str(Path(scratch))},
                                 args=("--log-level", "warning"))
        headers = {"X-API-Key": KEY}
        clients = [httpx.Client(headers=headers, timeout=60) for _ in range(4)]
        try:
            with ThreadPoolExecutor(4) as pool:
                loads = workloads(url, clients, pool)
                for load in loads.values():  # warm-up, not reported: imports, the page cache
                    for z in range(4):
                        load(z)
                figures: dict[str, dict[str, list[float]]] = {}
                for _ in range(args.rounds):
                    for name, load in loads.items():
                        times = np.array([load(z) for z in range(DEPTH) for _ in range(2)])
                        found = figures.setdefault(name, {"p50": [], "p99": []})
                        found["p50"].append(float(np.percentile(times, 50)))
                        found["p99"].append(float(np.percentile(times, 99)))
        finally:
            for client in clients:
                client.close()
            stop_server(proc)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    yardstick = statistics.median(script)
    print(f"\nnoa viewer: {DEPTH} x {SIDE} x {SIDE} float32 noise, one person's requests on loopback, {cores} cores, "
          f"{args.rounds} rounds of {2 * DEPTH} requests each: median (min..max) of the rounds, in ms")
    print(f"yardstick: the 1024 x 1024 PNG by mrcfile + NumPy + Pillow in one process: {spread(script)}\n")
    print(f"{'workload':<18}{'p50 ms':>22}{'p99 ms':>22}{'p50 / script':>14}  goal")
    for name, found in figures.items():
        ratio = statistics.median(found["p50"]) / yardstick
        goal = ""
        if name == "slice PNG":
            goal = f"p99 < {GOAL_P99_MS:g} ms: " + ("met" if statistics.median(found["p99"]) < GOAL_P99_MS
                                                    else "NOT MET")
        print(f"{name:<18}{spread(found['p50']):>22}{spread(found['p99']):>22}{ratio:>14.2f}  {goal}")


if __name__ == "__main__":
    main()
