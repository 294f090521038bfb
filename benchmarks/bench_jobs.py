"""The job store's figures (issue 44 item 6): the JSON files of earlier versions against SQLite and PostgreSQL.

Each store (``noa_server.jobs.JobStore`` in a fresh state folder: SQLite by default, PostgreSQL with a database URL;
and the JSON records under an flock of commit 6998226, loaded from ``git show`` as a module of its own) runs, in
turns within one run (ROUNDS rounds, each store once per round, a fresh folder or database each time):

- submits: JOBS submits of a job whose work returns at once, ``submit(operation, request, work, start)`` with
  ``start`` a ThreadPoolExecutor(2)'s submit, timed until every job is recorded as succeeded; then the listing of
  all of them, ``page`` by pages of 100 (the API's default) until the last. The JSON store has no listing.
- submit to start: LATENCY jobs submitted one at a time (each waited for before the next, so that none queues
  behind another): the time from ``submit`` returning to the work function starting, median and 90th percentile.
- status reads: READS ``snapshot`` calls for a finished job, as ``GET /v1/jobs/{id}`` makes them.

PostgreSQL is Debian's (``initdb`` on the PATH or in /usr/lib/postgresql/<version>/bin), started in a temporary
folder on a loopback port with its default durability (fsync on), as user nobody when run as root; without it the
row says why. SQLite syncs its WAL at every commit; the JSON store never syncs. Prints each figure's median over
the rounds with its spread (lowest-highest).

    .venv/bin/python benchmarks/bench_jobs.py --rounds 3
    .venv/bin/python benchmarks/bench_jobs.py --jobs 200 --latency 50 --reads 500 --rounds 1
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers import fresh_database, postgres_server
from noa_server.jobs import JobStore

REPO = Path(__file__).resolve().parents[1]
JSON_STORE_COMMIT = "6998226"  # the last commit whose server/jobs.py kept jobs as JSON files
PAGE = 100


def json_store_module(folder: Path) -> ModuleType:
    """server/jobs.py of JSON_STORE_COMMIT, imported from a copy in ``folder`` as a module of its own."""
    source = subprocess.run(["git", "show", f"{JSON_STORE_COMMIT}:server/jobs.py"], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout
    path = folder / "json_jobs.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("json_jobs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def percentile_90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def measure(store: Any, args: argparse.Namespace) -> dict[str, float]:
    """One round's figures of ``store`` (either kind: they share submit, snapshot and the Job they return)."""
    pool = ThreadPoolExecutor(2)
    try:
        begun = time.perf_counter()
        submitted = [store.submit("stats", {"path": f"m{i:04d}.mrc"}, lambda progress: None, pool.submit)
                     for i in range(args.jobs)]
        futures.wait([job.future for job in submitted])
        figures = {"submits/s": args.jobs / (time.perf_counter() - begun)}
        if any(job.status != "succeeded" for job in submitted):
            raise SystemExit(f"not every job succeeded: {[job.status for job in submitted]}")
        if hasattr(store, "page"):
            begun = time.perf_counter()
            listed, after = store.page(None, None, PAGE, None)
            while after is not None:
                more, after = store.page(None, None, PAGE, after)
                listed += more
            figures["list all ms"] = (time.perf_counter() - begun) * 1000
            if len(listed) != args.jobs:
                raise SystemExit(f"listed {len(listed)} jobs of {args.jobs}")

        delays = []
        for i in range(args.latency):
            started: list[float] = []
            job = store.submit("stats", {"path": f"l{i:04d}.mrc"}, lambda progress: started.append(time.perf_counter()),
                               pool.submit)
            returned = time.perf_counter()
            job.future.result()
            delays.append(started[0] - returned)
        figures["start median ms"] = statistics.median(delays) * 1000
        figures["start p90 ms"] = percentile_90(delays) * 1000

        finished = submitted[0].id
        begun = time.perf_counter()
        for _ in range(args.reads):
            if store.snapshot(finished)["status"] != "succeeded":
                raise SystemExit(f"job {finished} read as not succeeded")
        figures["reads/s"] = args.reads / (time.perf_counter() - begun)
        return figures
    finally:
        store.stop()
        pool.shutdown()
        if hasattr(store, "db"):  # the database stores: their connections (the JSON store has only its lock file)
            store.db.close()


COLUMNS = {"submits/s": 0, "list all ms": 1, "start median ms": 2, "start p90 ms": 2, "reads/s": 0}  # name: decimals


def spread(values: list[float], digits: int) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500, help="jobs submitted, then listed")
    parser.add_argument("--latency", type=int, default=100, help="jobs timed from submit to start")
    parser.add_argument("--reads", type=int, default=2000, help="status reads of a finished job")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-jobs-") as scratch, postgres_server(fsync=True) as (server, why):
        folder = Path(scratch)
        json_jobs = json_store_module(folder)
        stores: dict[str, Callable[[Path], Any]] = {
            "JSON files": lambda state: json_jobs.JobStore(state),
            "SQLite": lambda state: JobStore(state),
        }
        if server is not None:
            stores["PostgreSQL"] = lambda state: JobStore(state, database=fresh_database(server))
        results: dict[str, list[dict[str, float]]] = {name: [] for name in stores}
        for round_number in range(args.rounds):
            for name, open_store in stores.items():  # in turns: each round measures every store once
                results[name].append(measure(open_store(folder / f"{name}-{round_number}"), args))
        print(f"{args.jobs} jobs submitted then listed, {args.latency} timed from submit to start, {args.reads} "
              f"status reads; median (lowest-highest) of {args.rounds} rounds")
        print(f"  {'store':12s}" + "".join(f"{column:>24s}" for column in COLUMNS))
        for name, rounds in results.items():
            cells = [spread([figures[column] for figures in rounds], digits) if column in rounds[0] else "-"
                     for column, digits in COLUMNS.items()]
            print(f"  {name:12s}" + "".join(f"{cell:>24s}" for cell in cells))
        print("  JSON files: no listing (that store had none)")
        if why is not None:
            print(f"  PostgreSQL left out: {why}")


if __name__ == "__main__":
    main()
