"""Reading an object from S3: the client libraries noa could read through, against boto3 in the same run.

A moto S3 server runs in a process of its own on a loopback port (``moto_server``, from moto[server]); one object of
``--mib`` MiB of random bytes is put in a bucket, then each client reads it whole, in turns, ``--rounds`` times:

- ``boto3``: ``get_object(...)["Body"].read()``, the yardstick;
- ``s3fs``: fsspec's S3 file system (what noa reads through): ``cat_file`` of the whole object, and
  ``cat_ranges`` of it in 16 MiB ranges (as noa's tiles read a file), fetched concurrently by s3fs;
- ``obstore``: ``obstore.get(...).bytes()`` and ``obstore.get_ranges`` in the same 16 MiB ranges, where obstore is
  installed (``pip install obstore``; noa does not depend on it).

Prints each client's median MiB/s and its ratio to boto3's (above 1: faster), with the rounds' spread. On loopback the
server is moto's Python code: a client that waits on it less shows its own cost; a real S3 or MinIO endpoint
(``--endpoint URL``, credentials from the environment) measures the network instead.

    python benchmarks/bench_remote.py [--mib 256] [--rounds 3] [--endpoint URL --bucket NAME]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import boto3
import fsspec

RANGE_BYTES = 16 << 20
KEY = "bench-remote.bin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto() -> tuple[subprocess.Popen, str]:
    """A moto S3 server in a process of its own, and its URL, once it answers."""
    port = free_port()
    server = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return server, url
        except OSError:
            time.sleep(0.05)
    server.kill()
    raise SystemExit("moto_server did not start (pip install 'moto[server]')")


def clients(endpoint: str, bucket: str, size: int) -> dict[str, Callable[[], int]]:
    """Each client's whole read of the object, returning the bytes it got."""
    s3 = boto3.client("s3", endpoint_url=endpoint)
    fs = fsspec.filesystem("s3", endpoint_url=endpoint, skip_instance_cache=True)
    url = f"{bucket}/{KEY}"
    starts = list(range(0, size, RANGE_BYTES))
    stops = [min(start + RANGE_BYTES, size) for start in starts]
    read: dict[str, Callable[[], int]] = {
        "boto3 get_object": lambda: len(s3.get_object(Bucket=bucket, Key=KEY)["Body"].read()),
        "s3fs cat_file": lambda: len(fs.cat_file(url)),
        "s3fs cat_ranges 16 MiB": lambda: sum(map(len, fs.cat_ranges([url] * len(starts), starts, stops))),
    }
    try:
        import obstore
        from obstore.store import S3Store
    except ImportError:
        print("obstore is not installed: its rows are left out (pip install obstore)")
        return read
    store = S3Store(bucket, endpoint=endpoint, client_options={"allow_http": True},
                    region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    read["obstore get"] = lambda: len(obstore.get(store, KEY).bytes())
    read["obstore get_ranges 16 MiB"] = lambda: sum(map(len, obstore.get_ranges(store, KEY, starts=starts,
                                                                                 ends=stops)))
    return read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--endpoint", default=None, help="an S3 endpoint to use instead of a moto server here")
    parser.add_argument("--bucket", default="bench")
    args = parser.parse_args()
    server = None
    if args.endpoint is None:
        server, endpoint = start_moto()
        os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    else:
        endpoint = args.endpoint
    try:
        size = args.mib << 20
        s3 = boto3.client("s3", endpoint_url=endpoint)
        if server is not None:
            s3.create_bucket(Bucket=args.bucket)
        s3.put_object(Bucket=args.bucket, Key=KEY, Body=os.urandom(size))
        read = clients(endpoint, args.bucket, size)
        speeds: dict[str, list[float]] = {name: [] for name in read}
        for _ in range(args.rounds):  # in turns: each round reads with every client once
            for name, client in read.items():
                start = time.perf_counter()
                got = client()
                seconds = time.perf_counter() - start
                if got != size:
                    raise SystemExit(f"{name} read {got} bytes of {size}")
                speeds[name].append(args.mib / seconds)
        yardstick = statistics.median(speeds["boto3 get_object"])
        print(f"one {args.mib} MiB object, {'moto on loopback' if server else endpoint}; median of {args.rounds} "
              "rounds in turns")
        print(f"{'client':28s} {'MiB/s':>8s} {'x boto3':>8s}   spread MiB/s")
        for name, values in speeds.items():
            median = statistics.median(values)
            print(f"{name:28s} {median:8.1f} {median / yardstick:8.2f}   {min(values):.1f}-{max(values):.1f}")
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()
