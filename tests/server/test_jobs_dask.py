"""Jobs on a Dask cluster: `noa serve --scheduler local:2` on a loopback port, its jobs run by the cluster's worker
processes (a large file split into tile tasks, anything else one task), compared with the CLI's outputs."""

from __future__ import annotations

import contextlib
import gzip
import json
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from helpers import (
    EXAMPLE_MAP,
    assert_same_data,
    assert_same_file,
    assert_user_error,
    noa,
    object_store,
    start_server,
    stop_server,
    wait_job,
)
from noa_core.run import cluster

pytest.importorskip("distributed", reason="the dask extra of noa is not installed")

KEY = "dask-test-key"
AUTH = {"X-API-Key": KEY}
BIG = [8000, 20, 20, 20]  # 256 MB: over a task's share (128 MiB), so written by tile tasks (write_split)
UNCOMMITTED_WAIT_S = 8.0  # how long a cancelled task's output is looked for (it would be written in 1-3 s)
RESPONSIVE_S = 5.0  # a generous bound for a request answered while the cluster is busy


@dataclass
class Service:
    root: Path
    url: str
    proc: subprocess.Popen

    def workers(self) -> list[psutil.Process]:
        """The local cluster's worker processes: children of the service, spawned by multiprocessing."""
        return [child for child in psutil.Process(self.proc.pid).children()
                if "spawn_main" in " ".join(child.cmdline())]


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[Service]:
    base = tmp_path_factory.mktemp("dask")
    root = base / "root"
    root.mkdir()
    shutil.copy(EXAMPLE_MAP, root / "emd.map")
    # One worker thread: were jobs run in the pool, a request would wait behind them.
    args = ("--data-root", str(root), "--api-key", KEY, "--scheduler", "local:2", "--workers", "1", "--processes", "1",
            "--no-warmup", "--log-level", "warning")
    proc, url = start_server(None, base / "server.log", args=args)
    try:
        service = Service(root, url, proc)
        deadline = time.monotonic() + 60
        while len(service.workers()) < 2:  # the cluster starts beside the service
            assert time.monotonic() < deadline, (base / "server.log").read_text()
            time.sleep(0.1)
        yield service
    finally:
        stop_server(proc)


@pytest.fixture
def api(service) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service.url, headers=AUTH, timeout=60) as client:
        yield client


@contextlib.contextmanager
def _stopped(processes: list[psutil.Process]) -> Iterator[None]:
    """The processes held still (SIGSTOP) within the block: a cluster whose workers are all busy."""
    for process in processes:
        process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        for process in processes:
            process.send_signal(signal.SIGCONT)


def _submit(api: httpx.Client, **job) -> str:
    response = api.post("/v1/jobs", json=job)
    assert response.status_code == 202, response.text
    return response.headers["location"]


def _running(api: httpx.Client, location: str) -> dict:
    deadline = time.monotonic() + 30
    while (state := api.get(location).json())["status"] == "queued":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert state["status"] == "running", state
    return state


def test_jobs_run_on_the_cluster_workers_and_write_what_the_cli_writes(service, api, tmp_path):
    workers = service.workers()
    assert len(workers) == 2 and service.proc.pid not in [w.pid for w in workers]
    with _stopped(workers):  # nothing moves while the workers are held: the service does not do the work itself
        big = _submit(api, operation="broadcast", src="emd.map", dst="big.mrc", shape=BIG)
        small = _submit(api, operation="permute", src="emd.map", dst="p.mrc", axes=[0, 3, 2, 1])
        report = _submit(api, operation="stats", path="emd.map")
        for location in (big, small, report):
            _running(api, location)
        time.sleep(1.0)
        assert [api.get(loc).json()["progress"]["done"] for loc in (big, small, report)] == [0, 0, 0]
        assert not (service.root / "big.mrc").exists() and not (service.root / "p.mrc").exists()
        # Answered while every job waits on the cluster (the worker pool is free): a generous bound, not a speed test.
        started = time.monotonic()
        assert api.get("/v1/view/info", params={"file": "emd.map"}).status_code == 200
        assert api.post("/v1/paths/info", json={"path": "emd.map"}).status_code == 200
        assert time.monotonic() - started < RESPONSIVE_S
    states = {location: wait_job(api, location) for location in (big, small, report)}
    assert [s["status"] for s in states.values()] == ["succeeded"] * 3, states
    assert states[big]["progress"] == {"done": 2, "total": 2}  # two tile tasks of 128 MiB
    assert states[small]["progress"] == {"done": 1, "total": 1}
    for args, name in ((["broadcast", "--shape", ",".join(map(str, BIG))], "big.mrc"),
                       (["permute", "--axes", "0,3,2,1"], "p.mrc")):
        cli = noa(args[0], str(service.root / "emd.map"), str(tmp_path / name), *args[1:])
        assert cli.returncode == 0, cli.stderr
        assert_same_data(service.root / name, tmp_path / name)
        assert_same_file(service.root / name, tmp_path / name)
    cli = noa("stats", str(service.root / "emd.map"), "--json")
    assert cli.returncode == 0, cli.stderr
    assert api.get(f"{report}/result").json() == {**json.loads(cli.stdout), "path": "emd.map"}


def test_a_link_planted_under_a_split_job_is_refused_by_its_workers(service, api, tmp_path):
    """A file larger than a task's share is written by tile tasks, which open the input by the path the service
    checked. Replaced by a link to a file outside the data root while the tasks wait for the (held) workers, it is
    refused there (403), not followed: the file outside is of the same shape, so a worker following the link would
    write its data and succeed. No output is committed."""
    outside = tmp_path / "secret.map"
    shutil.copy(EXAMPLE_MAP, outside)
    shutil.copy(EXAMPLE_MAP, service.root / "swapped.map")
    # the service's first job connects it to the cluster, which waits for the workers: not held then
    assert wait_job(api, _submit(api, operation="stats", path="emd.map"))["status"] == "succeeded"
    with _stopped(service.workers()):
        job = _submit(api, operation="broadcast", src="swapped.map", dst="swapped_big.mrc", shape=BIG)
        _running(api, job)
        deadline = time.monotonic() + 30
        while not any(p.name.startswith(".swapped_big") for p in service.root.iterdir()):  # planned, tasks submitted
            assert time.monotonic() < deadline
            time.sleep(0.02)
        (service.root / "swapped.map").unlink()
        (service.root / "swapped.map").symlink_to(outside)
    state = wait_job(api, job)
    assert state["status"] == "failed" and state["error"]["status"] == 403, state
    assert state["error"]["detail"].startswith("swapped.map: changed since it was checked: a symbolic link appeared"), \
        state
    assert str(tmp_path) not in state["error"]["detail"]
    deadline = time.monotonic() + 30
    while any(p.name.startswith(".swapped_big") for p in service.root.iterdir()):  # the temporary output is removed
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert not (service.root / "swapped_big.mrc").exists()


def test_a_cancelled_job_on_the_cluster_commits_nothing(service, api):
    """Deleted while its tasks wait for the (held) workers: a split file's tasks are cancelled, a one-task job's
    worker stops before it writes, and the cluster runs the next job."""
    with _stopped(service.workers()):
        big = _submit(api, operation="broadcast", src="emd.map", dst="cancelled_big.mrc", shape=BIG)
        small = _submit(api, operation="permute", src="emd.map", dst="cancelled_p.mrc", axes=[0, 3, 2, 1])
        for location in (big, small):
            _running(api, location)
            deleted = api.delete(location)
            assert deleted.status_code == 202 and deleted.json()["cancel_requested"]
        time.sleep(4 * cluster.CANCEL_CHECK_S)  # the service tells the cluster within CANCEL_CHECK_S
    deadline = time.monotonic() + 60
    while any(p.name.startswith(".cancelled") for p in service.root.iterdir()):  # the temporary output is removed
        assert time.monotonic() < deadline
        time.sleep(0.05)
    after = _submit(api, operation="permute", src="emd.map", dst="after.mrc", axes=[0, 1, 3, 2])
    assert wait_job(api, after)["status"] == "succeeded"
    assert not (service.root / "cancelled_big.mrc").exists() and not (service.root / "cancelled_p.mrc").exists()
    for location in (big, small):
        assert api.get(location).status_code == 404


def test_a_cancelled_one_task_write_on_the_cluster_commits_nothing(service, api):
    """A large output whose input is compressed (not mapped: one task writes it whole) deleted while the task waits
    for the (held) workers: the task is told to stop, and nothing is committed."""
    with gzip.open(service.root / "emd.mrc.gz", "wb", compresslevel=1) as packed:
        packed.write((service.root / "emd.map").read_bytes())
    with _stopped(service.workers()):
        location = _submit(api, operation="broadcast", src="emd.mrc.gz", dst="cancelled_gz.mrc", shape=BIG)
        _running(api, location)
        deleted = api.delete(location)
        assert deleted.status_code == 202 and deleted.json()["cancel_requested"]
        deadline = time.monotonic() + 30
        while api.get(location).status_code != 404:  # the job says cancelled while its task is held
            assert time.monotonic() < deadline, api.get(location).json()
            time.sleep(0.05)
        time.sleep(4 * cluster.CANCEL_CHECK_S)  # the service tells the cluster within CANCEL_CHECK_S
    # The task, released, stops before it writes. Had it run on, its temporary output would appear, then the output
    # (a few seconds here); no sign of an end is kept, so the output is looked for a while.
    started, wrote = time.monotonic(), False
    while time.monotonic() - started < UNCOMMITTED_WAIT_S:
        assert not (service.root / "cancelled_gz.mrc").exists()
        writing = any(p.name.startswith(".cancelled_gz") for p in service.root.iterdir())
        if wrote and not writing:  # it wrote and stopped: its temporary output removed, nothing committed
            break
        wrote = wrote or writing
        time.sleep(0.05)
    after = _submit(api, operation="permute", src="emd.map", dst="after_gz.mrc", axes=[0, 1, 3, 2])
    assert wait_job(api, after)["status"] == "succeeded"
    assert not (service.root / "cancelled_gz.mrc").exists()


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
def test_jobs_on_the_cluster_read_and_write_keys_of_an_object_storage_root(tmp_path):
    """`--data-root s3://...` with `--scheduler local:2`: the workers read and write the keys under the prefix (a
    moto server on loopback), as the CLI writes the files; a large output from a key (not mapped) is one task."""
    with object_store() as store:
        store.client.create_bucket(Bucket="facility")
        store.client.upload_file(str(EXAMPLE_MAP), "facility", "data/emd.map")
        args = ("--data-root", "s3://facility/data", "--state-dir", str(tmp_path / "state"), "--api-key", KEY,
                "--scheduler", "local:2", "--workers", "1", "--processes", "1", "--no-warmup", "--log-level", "warning")
        proc, url = start_server(None, tmp_path / "server.log", env=store.env(), args=args)
        try:
            with httpx.Client(base_url=url, headers=AUTH, timeout=60) as api:
                jobs = {name: _submit(api, operation=operation, src="emd.map", dst=name, **options)
                        for name, operation, options in (("p.mrc", "permute", {"axes": [0, 3, 2, 1]}),
                                                          ("big.mrc", "broadcast", {"shape": BIG}))}
                states = {name: wait_job(api, location) for name, location in jobs.items()}
                assert [s["status"] for s in states.values()] == ["succeeded"] * 2, states
                assert states["big.mrc"]["progress"] == {"done": 1, "total": 1}  # one task, not tiles
                report = wait_job(api, _submit(api, operation="stats", path="emd.map"))
        finally:
            stop_server(proc)
        for args, name in ((["permute", "--axes", "0,3,2,1"], "p.mrc"),
                           (["broadcast", "--shape", ",".join(map(str, BIG))], "big.mrc")):
            (tmp_path / f"served_{name}").write_bytes(
                store.client.get_object(Bucket="facility", Key=f"data/{name}")["Body"].read())
            cli = noa(args[0], str(EXAMPLE_MAP), str(tmp_path / name), *args[1:])
            assert cli.returncode == 0, cli.stderr
            assert_same_data(tmp_path / f"served_{name}", tmp_path / name)
        cli = noa("stats", str(EXAMPLE_MAP), "--json")
        assert report["result"] == {**json.loads(cli.stdout), "path": "emd.map"}


def test_noa_serve_refuses_a_scheduler_it_cannot_read(tmp_path):
    assert_user_error(noa("serve", "--data-root", str(tmp_path), "--scheduler", "locl:2"), "scheduler 'locl:2'",
                      "tcp://host:8786")
