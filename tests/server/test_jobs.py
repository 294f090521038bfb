"""The job store (server/jobs.py, server/job_db.py): jobs in SQLite by default, in PostgreSQL for several hosts.

Stand-in work (the store knows nothing of ops) except where a test says otherwise. The PostgreSQL tests start
Debian's server in a temporary folder on a loopback port, and skip with the reason where it cannot start.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import mrcfile
import numpy as np
import pytest
import sqlalchemy as sa

from helpers import (
    EXAMPLE_MAP,
    REPO,
    assert_problem,
    assert_user_error,
    free_port,
    noa,
    start_server,
    stop_server,
    wait_job,
    write_mrc,
)
from noa_server import jobs as job_module
from noa_server.job_db import SCHEMA_VERSION, jobs, schema
from noa_server.jobs import HOST_ID, JobStore
from noa_server.problems import ProblemError

KEY = "jobs-test-key"
AUTH = {"X-API-Key": KEY}


def _start(fn):
    pool = ThreadPoolExecutor(1)
    future = pool.submit(fn)
    pool.shutdown(wait=False)
    return future


def _wait(store: JobStore, job_id: str, statuses=("succeeded", "failed", "cancelled"), timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if store.snapshot(job_id)["status"] in statuses:
            return store.get(job_id)
        time.sleep(0.01)
    raise AssertionError(f"job {job_id} still {store.get(job_id).status}")


def _row(store: JobStore, job_id: str):
    with store.db.read() as conn:
        return conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).first()


def _counting(blocks: int = 1000, pause: float = 0.005):
    """Work of ``blocks`` blocks; the event is set once it runs, the list counts the blocks done."""
    started, done = threading.Event(), []

    def work(progress):
        for i in range(1, blocks + 1):
            started.set()
            time.sleep(pause)
            progress(i, blocks)
            done.append(i)
        return {}

    return work, started, done


# -- one store, SQLite ----------------------------------------------------------------------------------


def test_job_runs_and_survives_restart(tmp_path):
    store = JobStore(tmp_path)

    def work(progress):
        for i in range(1, 4):
            progress(i, 3)
        return {"output": "o.mrc", "notices": []}

    job = store.submit("permute", {"src": "a"}, work, _start)
    done = _wait(store, job.id)
    assert done.status == "succeeded" and done.public()["progress"] == {"done": 3, "total": 3}
    again = JobStore(tmp_path).get(job.id)
    assert again.status == "succeeded" and again.result == {"output": "o.mrc", "notices": []}
    # One SQLite file in the state folder, in WAL mode, at the schema's version.
    with store.db.read() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.execute(sa.select(schema.c.version)).scalars().all() == [SCHEMA_VERSION]
    assert (tmp_path / "jobs.sqlite").is_file()


def test_finished_jobs_expire_after_their_time_to_live(tmp_path):
    store = JobStore(tmp_path, ttl_seconds=1)
    old = store.submit("permute", {"src": "a"}, lambda progress: {"output": "o.mrc"}, _start)
    _wait(store, old.id)
    time.sleep(1.2)
    running = threading.Event()
    fresh = store.submit("permute", {"src": "b"}, lambda progress: running.wait(10), _start)  # expires `old`
    with pytest.raises(ProblemError) as info:
        store.get(old.id)
    assert info.value.status == 404
    assert _row(store, old.id) is None and _row(store, fresh.id) is not None
    time.sleep(1.2)
    store.submit("permute", {"src": "c"}, lambda progress: None, _start)
    assert store.get(fresh.id).status == "running"  # only finished jobs expire
    running.set()
    _wait(store, fresh.id)
    time.sleep(1.2)
    assert JobStore(tmp_path, ttl_seconds=0).get(fresh.id).status == "succeeded"  # 0 keeps records forever
    with pytest.raises(ProblemError):
        JobStore(tmp_path, ttl_seconds=1).get(fresh.id)  # expired at start-up
    assert _row(store, fresh.id) is None


def test_job_failure_is_a_problem(tmp_path):
    from noa_core import errors

    store = JobStore(tmp_path)

    def work(progress):
        raise errors.BroadcastError("shapes (1,1,2,2) and (1,1,3,3) cannot be broadcast")

    job = _wait(store, store.submit("broadcast", {}, work, _start).id)
    assert job.status == "failed"
    assert job.error["status"] == 422 and "cannot be broadcast" in job.error["detail"]
    assert job.error["instance"] == f"/v1/jobs/{job.id}"
    assert _row(store, job.id).error == job.error  # as recorded


def test_job_cancel_stops_between_blocks(tmp_path):
    store = JobStore(tmp_path)
    work, started, blocks = _counting()
    job = store.submit("copy", {}, work, _start)
    assert started.wait(5)
    assert store.cancel(job.id)["cancel_requested"]
    with pytest.raises(ProblemError):  # deleted at once
        store.get(job.id)
    deadline = time.monotonic() + 10
    while job.status != "cancelled":  # the worker stops at its next block
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert len(blocks) < 999
    assert _row(store, job.id) is None  # the winding-down job wrote no row back
    finished = store.submit("copy", {}, lambda progress: {}, _start)
    assert _wait(store, finished.id).status == "succeeded"
    assert store.cancel(finished.id) is None  # a finished job is simply deleted
    with pytest.raises(ProblemError):
        store.get(finished.id)
    assert not store.busy()


@pytest.mark.parametrize("kind", ["plan", "plans"])
def test_a_job_deleted_after_its_last_tile_commits_nothing(tmp_path, kind):
    """Issue 32 item 5: a job deleted while running still committed its output when the delete arrived after
    its last tile (the commit never looked at the cancel flag again). The drivers ask once more just before
    the output takes its name."""
    from noa_core import operations as registry
    from noa_core.run import local

    store = JobStore(tmp_path / "jobs")
    write_mrc(tmp_path / "in.mrcs", np.zeros((4, 8, 8), np.float32), stack=True)
    out = tmp_path / ("out.mrcs" if kind == "plan" else "parts")
    submitted, deleted = threading.Event(), []

    def work(progress):
        assert submitted.wait(10)

        def on_progress(done, total):
            if done == total and not deleted:  # the DELETE lands right after the last tile (or output)
                deleted.append(store.cancel(job.id))
            progress(done, total)

        if kind == "plan":
            return local.write(registry.get("copy").task(), tmp_path / "in.mrcs", out, progress=on_progress)
        return local.write_several(registry.get("split").task(), tmp_path / "in.mrcs", out, progress=on_progress)

    job = store.submit("copy", {}, work, _start)
    submitted.set()
    deadline = time.monotonic() + 30
    while job.status != "cancelled":
        assert job.status in ("queued", "running") and time.monotonic() < deadline, job.status
        time.sleep(0.01)
    assert deleted and not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["in.mrcs", "jobs"]


def test_stopping_records_running_jobs_as_interrupted(tmp_path):
    store = JobStore(tmp_path)
    release = threading.Event()

    def slow(progress):
        release.wait(5)
        progress(1, 2)
        return {}

    job = store.submit("copy", {}, slow, _start)
    _wait(store, job.id, ("running",))
    store.stop()
    release.set()
    store.wait_idle(5)
    assert JobStore(tmp_path).get(job.id).status == "failed"
    assert _row(store, job.id).error["detail"].startswith("interrupted")


def test_interrupted_jobs_resume_once(tmp_path):
    """POST /v1/jobs/{id}/resume's store side: an interrupted job runs again under its id, by one store only."""
    first = JobStore(tmp_path)
    job = first.submit("copy", {"src": "a"}, lambda progress: threading.Event().wait(10), _start)
    _wait(first, job.id, ("running",))
    first.stop()  # its worker stays blocked: the job is recorded as interrupted at once
    second, third = JobStore(tmp_path), JobStore(tmp_path)
    assert second.resumable(job.id) == {"src": "a", "operation": "copy"}
    runs = []
    resumed = second.resume(job.id, lambda progress: runs.append(1) or {"output": "o"}, _start)
    with pytest.raises(ProblemError) as again:  # another store (or a second request) finds it taken
        third.resume(job.id, lambda progress: runs.append(1), _start)
    assert again.value.status == 409 and again.value.slug == "job-not-interrupted"
    done = _wait(third, resumed.id)
    assert done.status == "succeeded" and done.result == {"output": "o"} and done.created == job.created
    assert runs == [1] and _row(third, job.id).owner_token == second._token
    with pytest.raises(ProblemError) as finished:
        third.resumable(job.id)
    assert finished.value.status == 409 and "succeeded" in finished.value.detail


def test_another_hosts_job_is_interrupted_once_its_heartbeat_is_older_than_the_lease(tmp_path, caplog):
    store = JobStore(tmp_path, lease_seconds=0.5)
    job_id = uuid.uuid4().hex
    with store.db.write() as conn:
        conn.execute(sa.insert(jobs).values(
            id=job_id, operation="copy", request={}, status="running", done=1, total=9, created=job_module._now(),
            owner_host="elsewhere/boot", owner_pid=os.getpid(), owner_start="1", owner_token="t",
            heartbeat=time.time()))
    assert store.get(job_id).status == "running"  # its heartbeat is fresh: the other host runs it
    time.sleep(0.6)
    with caplog.at_level(logging.WARNING, "noa.server"):
        readers = [store, JobStore(tmp_path, lease_seconds=0.5)]
        states = [reader.snapshot(job_id) for reader in readers for _ in range(2)]
    assert {s["status"] for s in states} == {"failed"} and len({s["finished"] for s in states}) == 1
    assert states[0]["error"]["type"].endswith("interrupted")
    assert sum(job_id in r.message for r in caplog.records) == 1  # recorded once


def test_owners_refresh_their_heartbeat(tmp_path, monkeypatch):
    monkeypatch.setattr(job_module, "HEARTBEAT_S", 0.05)
    store = JobStore(tmp_path)
    release = threading.Event()
    job = store.submit("copy", {}, lambda progress: release.wait(10), _start)
    _wait(store, job.id, ("running",))
    beats = [_row(store, job.id).heartbeat]
    time.sleep(0.3)
    beats.append(_row(store, job.id).heartbeat)
    release.set()
    _wait(store, job.id)
    assert beats[1] > beats[0]  # no progress call came: the heartbeat thread wrote it


# -- other processes -------------------------------------------------------------------------------------

# A server process with one job that counts blocks for up to 60 s (progress every 10 ms); it prints
# the job id, then waits for the job (or for a signal).
_OTHER_PROCESS = """
import sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from noa_server.jobs import JobStore

store = JobStore(Path(sys.argv[1]), database=sys.argv[2] or None)

def work(progress):
    for i in range(1, 6001):
        time.sleep(0.01)
        progress(i, 6000)
    return {}

job = store.submit("copy", {"src": "a"}, work, ThreadPoolExecutor(1).submit)
print(job.id, flush=True)
job.future.result()
print(job.status, flush=True)
"""


def _other_process(directory: Path, database: str = ""):
    proc = subprocess.Popen([sys.executable, "-c", _OTHER_PROCESS, str(directory), database], stdout=subprocess.PIPE,
                            text=True, cwd=REPO)
    return proc, proc.stdout.readline().strip()


def test_jobs_are_shared_by_server_processes(tmp_path):
    """Another process runs the job; this one sees its progress and cancels it through the shared database."""
    proc, job_id = _other_process(tmp_path)
    try:
        store = JobStore(tmp_path)
        deadline = time.monotonic() + 20
        while store.snapshot(job_id)["progress"]["done"] == 0:  # progress reaches the database
            assert time.monotonic() < deadline
            time.sleep(0.05)
        state = store.snapshot(job_id)
        assert state["status"] == "running" and state["progress"]["total"] == 6000
        assert [j["id"] for j in store.page("running", None, 10, None)[0]] == [job_id]
        assert store.cancel(job_id)["cancel_requested"]
        with pytest.raises(ProblemError):
            store.get(job_id)
        assert proc.stdout.readline().strip() == "cancelled"  # the owner stopped at its next block
        assert proc.wait(20) == 0
        assert _row(store, job_id) is None  # and wrote no row back
    finally:
        proc.kill()


def test_running_jobs_become_interrupted_once_when_their_process_is_killed(tmp_path, caplog):
    proc, job_id = _other_process(tmp_path)
    store = JobStore(tmp_path)
    deadline = time.monotonic() + 20
    while store.snapshot(job_id)["progress"]["done"] == 0:  # its owner is alive, and in the middle of the job
        assert store.snapshot(job_id)["status"] in ("queued", "running") and time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)  # a crash: the row still says running
    proc.wait(20)
    assert _row(store, job_id).status == "running"
    with caplog.at_level(logging.WARNING, "noa.server"):
        states = [reader.snapshot(job_id) for reader in (store, JobStore(tmp_path), store)]  # running and restarted
    assert {s["status"] for s in states} == {"failed"} and len({s["finished"] for s in states}) == 1
    assert states[0]["error"]["type"].endswith("interrupted") and states[0]["progress"]["done"] > 0
    assert sum(job_id in r.message for r in caplog.records) == 1  # recorded once, by one conditional UPDATE
    assert _row(store, job_id).status == "failed"


# -- the JSON records of earlier versions ----------------------------------------------------------------


def _record(job_id: str, status: str, owner: str, **changes) -> dict:
    return {"id": job_id, "operation": "permute", "status": status, "progress": {"done": 2, "total": 4},
            "created": "2026-01-02T03:04:05.678Z", "started": "2026-01-02T03:04:06.000Z", "finished": None,
            "request": {"operation": "permute", "src": "a.mrc"}, "error": None, "result": None, "owner": owner,
            **changes}


def test_json_records_are_imported_once(tmp_path, caplog):
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    done, crashed = "a" * 32, "b" * 32
    (tmp_path / f"{done}.json").write_text(json.dumps(_record(
        done, "succeeded", f"{boot}:1:1/x", finished="2026-01-02T03:04:09.000Z", result={"output": "p.mrc"})))
    (tmp_path / f"{crashed}.json").write_text(json.dumps(_record(crashed, "running", f"{boot}:999999999:5/y")))
    (tmp_path / ("c" * 32 + ".json")).write_text("{not json")  # a record cut short: skipped with a warning
    with caplog.at_level(logging.WARNING, "noa.server"):
        store = JobStore(tmp_path)
    state = store.snapshot(done)
    assert (state["status"], state["result"], state["finished"]) == ("succeeded", {"output": "p.mrc"},
                                                                     "2026-01-02T03:04:09.000Z")
    assert state["created"] == "2026-01-02T03:04:05.678Z" and state["progress"] == {"done": 2, "total": 4}
    interrupted = store.snapshot(crashed)  # its process is gone
    assert interrupted["status"] == "failed" and interrupted["error"]["type"].endswith("interrupted")
    with pytest.raises(ProblemError):
        store.get("c" * 32)
    assert any("c" * 32 in r.message and "unreadable" in r.message for r in caplog.records)
    assert sorted(p.name for p in tmp_path.glob("*.json")) == []
    assert sorted(p.name for p in (tmp_path / "imported").iterdir()) == [f"{n * 32}.json" for n in "abc"]
    store.cancel(done)
    JobStore(tmp_path)  # a second start imports nothing again
    with pytest.raises(ProblemError):
        store.get(done)


# -- listing ---------------------------------------------------------------------------------------------


def _fill(store: JobStore, count: int) -> list[dict]:
    """``count`` finished jobs written straight into the database, a few sharing a creation time; their rows."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    states = ("succeeded", "failed", "cancelled")
    rows = [{"id": uuid.uuid4().hex, "operation": "stats", "request": {"path": f"{i}.mrc"}, "status": states[i % 3],
             "done": 1, "total": 1, "created": job_module._stamp(start + timedelta(seconds=i // 3)), "started": None,
             "finished": None, "result": None, "error": None, "owner_host": HOST_ID, "owner_pid": 0, "owner_start": "",
             "owner_token": "", "heartbeat": 0.0} for i in range(count)]
    with store.db.write() as conn:
        conn.execute(sa.insert(jobs), rows)
    return rows


def _all_pages(client, **query) -> list[dict]:
    seen, cursor = [], None
    while True:
        response = client.get("/v1/jobs", params={**query, **({"cursor": cursor} if cursor else {})}, headers=AUTH)
        assert response.status_code == 200, response.text
        page = response.json()
        seen += page["jobs"]
        if page["next"] is None:
            return seen
        assert len(page["jobs"]) == query.get("limit", 100)
        cursor = page["next"]


def test_ten_thousand_jobs_are_listed_page_by_page(tmp_path, make_client):
    root = tmp_path / "root"
    root.mkdir()
    client = make_client(data_root=root, api_key=KEY)
    rows = _fill(client.app.state.service.jobs, 10_000)
    newest_first = sorted(rows, key=lambda r: (r["created"], r["id"]), reverse=True)
    listed = _all_pages(client, limit=1000)
    assert [j["id"] for j in listed] == [r["id"] for r in newest_first]  # each once, newest first
    failed = _all_pages(client, state="failed", limit=333)
    assert [j["id"] for j in failed] == [r["id"] for r in newest_first if r["status"] == "failed"]
    since = "2026-01-01T00:50:00.000+00:00"  # 3000 s after the first: its last 1000 jobs, 334 of them succeeded
    recent = _all_pages(client, state="succeeded", since=since)
    expected = [r["id"] for r in newest_first if r["status"] == "succeeded" and r["created"] >= "2026-01-01T00:50"]
    assert [j["id"] for j in recent] == expected and len(expected) == 334
    # a moment between two stamps (they have milliseconds): the jobs of 00:50:00.000 were created before it
    assert _all_pages(client, since="2026-01-01T00:50:00.0005", limit=1000)[-1]["created"] == "2026-01-01T00:50:01.000Z"
    earliest = client.get("/v1/jobs", params={"since": "0001-01-01T00:00:00+01:00", "limit": 1}, headers=AUTH)
    assert [j["id"] for j in earliest.json()["jobs"]] == [newest_first[0]["id"]]  # before year 1 in UTC: all
    latest = client.get("/v1/jobs", params={"since": "9999-12-31T23:59:59.999999Z"}, headers=AUTH)
    assert latest.json() == {"jobs": [], "next": None}
    first = client.get("/v1/jobs", headers=AUTH).json()
    assert len(first["jobs"]) == 100 and first["jobs"][0]["progress"] == {"done": 1, "total": 1}
    assert client.get("/v1/jobs", params={"since": "2027-01-01T00:00:00Z"}, headers=AUTH).json() == {
        "jobs": [], "next": None}


@pytest.mark.parametrize(("query", "name"), [
    ({"state": "done"}, "state"), ({"since": "yesterday"}, "since"), ({"since": "0.5"}, "since"),
    ({"since": "2026-01-01"}, "since"), ({"limit": "0"}, "limit"),
    ({"limit": "1001"}, "limit"), ({"limit": "many"}, "limit"), ({"cursor": "not-a-cursor"}, "cursor"),
    ({"cursor": ""}, "cursor"), ({"cursor": "2026-01-01T00:00:00.000Z_" + "g" * 32}, "cursor"),
])
def test_bad_listing_queries_are_400s_naming_the_parameter(tmp_path, make_client, query, name):
    root = tmp_path / "root"
    root.mkdir()
    client = make_client(data_root=root, api_key=KEY)
    problem = assert_problem(client.get("/v1/jobs", params=query, headers=AUTH), 400, "invalid-parameters")
    assert problem["detail"].startswith(name) or f"query.{name}" in problem["detail"]


def test_an_interrupted_job_resumes_over_http(tmp_path, make_client):
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(EXAMPLE_MAP, root / "emd.map")
    client = make_client(data_root=root, api_key=KEY)
    store = client.app.state.service.jobs
    job_id, older = uuid.uuid4().hex, uuid.uuid4().hex  # permutes whose process died before they wrote their output
    # as the service records a request: every field, those not given as null
    request = {"operation": "permute", "src": "emd.map", "dst": "p.mrc", "axes": [0, 3, 2, 1], "pixel_size": None,
               "chunks": None}
    with store.db.write() as conn:
        for key, recorded in ((job_id, request), (older, {**request, "dst": "q.mrc", "gone": 1})):
            conn.execute(sa.insert(jobs).values(
                id=key, operation="permute", request=recorded, status="running", done=0, total=0,
                created=job_module._now(), owner_host=HOST_ID, owner_pid=0, owner_start="", owner_token="gone",
                heartbeat=0.0))
    # recorded by a noa whose permute took a parameter this one does not
    assert_problem(client.post(f"/v1/jobs/{older}/resume", headers=AUTH), 409, "job-not-resumable")
    assert not (root / "q.mrc").exists()
    location = f"/v1/jobs/{job_id}"
    assert client.get(location, headers=AUTH).json()["status"] == "failed"
    response = client.post(location + "/resume", headers=AUTH)
    assert response.status_code == 202 and response.headers["location"] == location
    assert wait_job(client, location, 60, headers=AUTH)["status"] == "succeeded"
    with mrcfile.open(root / "emd.map") as src, mrcfile.open(root / "p.mrc") as out:
        np.testing.assert_array_equal(out.data, np.transpose(src.data, (2, 1, 0)))
    assert_problem(client.post(location + "/resume", headers=AUTH), 409, "job-not-interrupted")
    assert_problem(client.post(f"/v1/jobs/{'0' * 32}/resume", headers=AUTH), 404, "job-not-found")


@pytest.mark.parametrize(("database", "message"), [
    ("mysql://noa@db/jobs", "database 'mysql://noa@db/jobs' is not a postgresql:// or sqlite:/// URL"),
    ("postgresql://noa:secret@127.0.0.1:{port}/jobs", "cannot open the jobs database postgresql+psycopg://noa:***@"),
])
def test_noa_serve_refuses_a_database_it_cannot_use_clearly(tmp_path, database, message):
    """Exit 2 and one line (the password hidden), from --database or NOA_DATABASE."""
    database = database.format(port=free_port())  # nothing listens there
    assert_user_error(noa("serve", "--data-root", tmp_path, "--database", database, "--no-warmup"), message)
    assert_user_error(noa("serve", "--data-root", tmp_path, "--no-warmup", env={"NOA_DATABASE": database}), message)


# -- PostgreSQL: several hosts on one database ---------------------------------------------------------


def test_postgres_store_runs_lists_and_interrupts(tmp_path, pg_database):
    store = JobStore(tmp_path / "a", database=pg_database)
    other = JobStore(tmp_path / "b", database=pg_database, lease_seconds=0.5)  # another host's view: no file shared
    job = store.submit("stats", {"path": "x"}, lambda progress: progress(1, 1) or {"mean": 1.5}, _start)
    assert _wait(other, job.id).result == {"mean": 1.5}
    assert [j["id"] for j in other.page("succeeded", None, 10, None)[0]] == [job.id]
    assert not (tmp_path / "a" / "jobs.sqlite").exists()
    proc, job_id = _other_process(tmp_path / "c", pg_database)
    try:
        assert _wait(other, job_id, ("running",)).status == "running"
        proc.send_signal(signal.SIGKILL)
        proc.wait(20)
        assert store.snapshot(job_id)["status"] == "failed"  # this host: its process is gone
    finally:
        proc.kill()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_job_id_given_is_recorded_once_whoever_submits_it(tmp_path, request, backend):
    """Two stores (two processes of a watch) submitting one job id: the first records and runs it, the second is
    told 409 job-exists and runs nothing."""
    database = request.getfixturevalue("pg_database") if backend == "postgres" else None
    first, second = (JobStore(tmp_path / name, database=database) if database else JobStore(tmp_path)
                     for name in "ab")
    ran = []
    job_id = uuid.uuid4().hex
    assert first.submit("stats", {"path": "x"}, lambda progress: ran.append(1) or {"mean": 1.0}, _start,
                        job_id=job_id).id == job_id
    with pytest.raises(ProblemError) as refused:
        second.submit("stats", {"path": "x"}, lambda progress: ran.append(2) or {"mean": 2.0}, _start, job_id=job_id)
    assert (refused.value.status, refused.value.slug) == (409, "job-exists")
    assert _wait(second, job_id).result == {"mean": 1.0} and ran == [1]
    assert [j["id"] for j in second.page("succeeded", None, 10, None)[0]] == [job_id]


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
def test_two_services_share_one_postgres_database(tmp_path, pg_database):
    """Two `noa serve` on two ports (two hosts: each its own state folder) and one database: a job submitted to
    one is listed, followed and cancelled through the other, and runs once, in the service it was submitted to."""
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(EXAMPLE_MAP, root / "emd.map")
    services = []
    try:
        for name in ("a", "b"):
            args = ("--data-root", str(root), "--state-dir", str(tmp_path / name), "--database", pg_database,
                    "--api-key", KEY, "--workers", "1", "--processes", "1", "--no-warmup", "--log-level", "warning")
            services.append(start_server(None, tmp_path / f"{name}.log", args=args))
        (proc_a, url_a), (_, url_b) = services
        with httpx.Client(base_url=url_a, headers=AUTH, timeout=60) as a, \
                httpx.Client(base_url=url_b, headers=AUTH, timeout=60) as b:
            # Runs once: in A, whose process alone writes its row; its output is written once (one inode).
            location = a.post("/v1/jobs", json={"operation": "permute", "src": "emd.map", "dst": "p.mrc",
                                                "axes": [0, 3, 2, 1]}).headers["location"]
            assert wait_job(b, location)["status"] == "succeeded"
            written = (root / "p.mrc").stat()
            assert [j["id"] for j in b.get("/v1/jobs").json()["jobs"]] == [location.rsplit("/", 1)[1]]
            # Followed and cancelled through B while A runs it. A is held still (SIGSTOP) in the middle of the job,
            # as a busy host would be: this machine writes the whole output faster than a client can poll.
            location = a.post("/v1/jobs", json={"operation": "broadcast", "src": "emd.map", "dst": "big.mrc",
                                                "shape": [8000, 20, 20, 20]}).headers["location"]
            deadline = time.monotonic() + 30
            while (state := b.get(location).json())["progress"]["done"] == 0:
                assert state["status"] in ("queued", "running") and time.monotonic() < deadline, state
                time.sleep(0.005)
            proc_a.send_signal(signal.SIGSTOP)
            try:
                state = b.get(location).json()
                assert state["status"] == "running" and 0 < state["progress"]["done"] < state["progress"]["total"]
                listed = b.get("/v1/jobs", params={"state": "running"}).json()["jobs"]
                assert [j["id"] for j in listed] == [state["id"]]
                cancelled = b.delete(location)
                assert cancelled.status_code == 202 and cancelled.json()["cancel_requested"]
            finally:
                proc_a.send_signal(signal.SIGCONT)
            assert_problem(a.get(location), 404, "job-not-found")
            deadline = time.monotonic() + 30
            while any(p.name.startswith(".big") for p in root.iterdir()):  # A's worker stops and cleans up
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert not (root / "big.mrc").exists()
            time.sleep(2 * job_module.HEARTBEAT_S)  # a second run would have replaced the output by now
            assert (root / "p.mrc").stat().st_ino == written.st_ino
            assert a.get("/v1/jobs").json()["jobs"][0]["status"] == "succeeded"
        with sa.create_engine(pg_database.replace("postgresql:", "postgresql+psycopg:")).connect() as conn:
            assert conn.execute(sa.select(jobs.c.owner_pid)).scalars().all() == [proc_a.pid]
    finally:
        for proc, _ in services:
            stop_server(proc)
