"""A watched folder's delay: from a file's last write to the start of its job, polling and inotify.

`noa serve` (one process, no warm-up) runs on a temporary data root; one watch per mode (`stats` of each `*.mrc`,
so that the job itself costs nothing to speak of), each fed FILES small MRC files, one every INTERVAL seconds.
The delay of a file is its job's `started` (the service's clock, milliseconds) minus the file's modification time
after its last write. It is at least `settle_seconds` (a file is taken once it has stood still that long), plus,
when polling, up to `poll_seconds` until the folder is listed again.

    python benchmarks/bench_watch.py [--files 20] [--interval 0.5] [--settle 2] [--poll 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx
import mrcfile
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers import start_server, stop_server


def delays(client: httpx.Client, root: Path, mode: str, args: argparse.Namespace) -> list[float]:
    folder = root / mode
    folder.mkdir()
    watch = client.post("/v1/watches", json={
        "name": mode, "folder": mode, "pattern": "*.mrc", "job": {"operation": "stats"},
        "settle_seconds": args.settle, "poll": mode == "polling", "poll_seconds": args.poll})
    watch.raise_for_status()
    location = watch.headers["location"]
    while not client.get(location).json()["scanning"]:
        time.sleep(0.05)
    written = {}
    for i in range(args.files):
        path = folder / f"m{i:03d}.mrc"
        with mrcfile.new(path, np.full((64, 64), i, np.float32)):
            pass
        written[f"{mode}/{path.name}"] = os.stat(path).st_mtime_ns / 1e9
        time.sleep(args.interval)
    deadline = time.monotonic() + args.settle + args.poll + 60
    while client.get(location).json()["jobs"]["succeeded"] < args.files:
        if time.monotonic() > deadline:
            raise SystemExit(f"{mode}: not every file became a job: {client.get(location).json()}")
        time.sleep(0.1)
    client.delete(location).raise_for_status()
    found = []
    cursor = None
    while True:
        page = client.get("/v1/jobs", params={"limit": 1000, **({"cursor": cursor} if cursor else {})}).json()
        found += [job for job in page["jobs"] if job["request"]["path"] in written]
        if page["next"] is None:
            break
        cursor = page["next"]
    return [datetime.fromisoformat(job["started"]).timestamp() - written[job["request"]["path"]] for job in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between two files")
    parser.add_argument("--settle", type=float, default=2.0, help="the watch's settle_seconds")
    parser.add_argument("--poll", type=float, default=5.0, help="the polled watch's poll_seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as base:
        root = Path(base, "root")
        root.mkdir()
        proc, url = start_server(root, Path(base, "server.log"),
                                 {"NOA_WARMUP": "0"}, args=("--processes", "1", "--log-level", "warning"))
        try:
            with httpx.Client(base_url=url, timeout=30) as client:
                print(f"{args.files} files, one every {args.interval} s; settle_seconds {args.settle}, "
                      f"poll_seconds {args.poll}")
                print(f"{'mode':10} {'median s':>9} {'p90 s':>7} {'min s':>7} {'max s':>7}")
                for mode in ("inotify", "polling"):
                    seconds = sorted(delays(client, root, mode, args))
                    p90 = seconds[min(len(seconds) - 1, round(0.9 * (len(seconds) - 1)))]
                    print(f"{mode:10} {statistics.median(seconds):9.3f} {p90:7.3f} {seconds[0]:7.3f} "
                          f"{seconds[-1]:7.3f}")
        finally:
            stop_server(proc)


if __name__ == "__main__":
    main()
