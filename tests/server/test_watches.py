"""Watched folders (server/watches.py, server/watch_db.py, server/routes/watches.py): files landing in a folder under
the data root become jobs once they stopped growing, each exactly once, across restarts and service processes.

The live tests run `noa serve --watch CONFIG` and write MRC files into the watched folder as an acquisition does:
in bursts and one by one, some in two halves with a pause (a file still being written must not be taken). The
outputs are checked against NumPy on what mrcfile reads, and a couple against the CLI's.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import uuid
from pathlib import Path

import httpx
import mrcfile
import numpy as np
import pytest
import sqlalchemy as sa

from helpers import EXAMPLE_MAP, REPO, assert_problem, assert_user_error, noa, start_server, stop_server, wait_job
from noa_server.job_db import Database, jobs, sqlite_url
from noa_server.watch_db import taken, watches

KEY = "watch-test-key"
AUTH = {"X-API-Key": KEY}
PERMUTE = {"operation": "permute", "axes": [0, 1, 3, 2]}


def _watch(**changes) -> dict:
    """A watch on in/ (polled quickly: tests are short) that transposes each MRC into out/."""
    return {"name": "incoming", "folder": "in", "pattern": "*.mrc", "job": PERMUTE, "output": "out",
            "settle_seconds": 0.3, "poll": True, "poll_seconds": 0.05, **changes}


def _data(i: int) -> np.ndarray:
    return (np.arange(6 * 10, dtype=np.float32).reshape(6, 10) + 1000 * i)


def _mrc_bytes(tmp: Path, i: int) -> bytes:
    """The bytes of an MRC file mrcfile writes (another program's file)."""
    path = tmp / f"{i}.mrc"
    with mrcfile.new(path, _data(i), overwrite=True):
        pass
    return path.read_bytes()


def _wait_until(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return value


# -- the doors, in process ---------------------------------------------------------------------------------


@pytest.fixture
def root(tmp_path) -> Path:
    root = tmp_path / "root"
    (root / "in").mkdir(parents=True)
    (root / "elsewhere").mkdir()
    return root


BAD_WATCHES = [
    ({"job": {"operation": "transmogrify"}}, 422, "job.operation"),
    ({"job": {"operation": "permute"}}, 422, "job.axes"),  # a required value missing
    ({"job": {**PERMUTE, "axes": [0, 1, 2]}}, 422, "job.axes"),
    ({"job": {**PERMUTE, "bogus": 1}}, 422, "job.bogus"),
    ({"job": {**PERMUTE, "dst": "x.mrc"}}, 422, "job.dst"),  # the watch names the paths
    ({"job": {}}, 422, "job.operation"),
    ({"pattern": "sub/*.mrc"}, 400, "pattern"),
    ({"pattern": ""}, 400, "pattern"),
    ({"name": "no spaces"}, 400, "name"),
    ({"settle_seconds": -1}, 400, "settle_seconds"),
    ({"poll_seconds": 0}, 400, "poll_seconds"),
    ({"surprise": True}, 400, "surprise"),
    ({"output": None}, 422, "output"),  # permute writes files: they need a folder
    ({"output": "in"}, 422, "output"),  # outputs would land in the watched folder
    ({"job": {"operation": "stats"}}, 422, "output"),  # stats writes nothing
    ({"ext": "tif"}, 400, "ext"),
    ({"folder": "../outside"}, 403, "folder"),
    ({"folder": "/etc"}, 403, "folder"),
    ({"output": "../outside"}, 403, "output"),
    ({"folder": ".noa-jobs"}, 403, "folder"),  # the state folder
    ({"folder": "missing"}, 404, "folder"),
]


def test_bad_watches_are_problems_naming_the_field(root, make_client):
    client = make_client(data_root=root, api_key=KEY)
    for changes, status, field in BAD_WATCHES:
        response = client.post("/v1/watches", json=_watch(**changes), headers=AUTH)
        problem = assert_problem(response, status)
        assert problem["detail"].startswith((field, f"body.{field}")), (changes, problem)
    assert client.get("/v1/watches", headers=AUTH).json() == {"watches": []}  # nothing recorded
    assert not (root / "out").exists()


def test_a_watch_is_created_listed_counted_and_deleted(root, make_client):
    """inotify (watchfiles) this time: files are taken, counted, and no longer once the watch is deleted."""
    client = make_client(data_root=root, api_key=KEY)
    response = client.post("/v1/watches", json=_watch(poll=False, settle_seconds=0.2, ext=".tif"), headers=AUTH)
    assert response.status_code == 201, response.text
    location = response.headers["location"]
    made = response.json()
    assert location == f"/v1/watches/{made['id']}" and made["files"] == 0 and made["job"] == PERMUTE
    assert_problem(client.post("/v1/watches", json=_watch(), headers=AUTH), 409, "watch-exists")
    for i in range(3):
        (root / "in" / f"m{i}.mrc").write_bytes(_mrc_bytes(root / "elsewhere", i))
    (root / "in" / "notes.txt").write_text("not an MRC")
    (root / "in" / ".m9.mrc").write_bytes(_mrc_bytes(root / "elsewhere", 9))  # hidden: a writer's temporary name
    state = _wait_until(lambda: (s := client.get(location, headers=AUTH).json())["jobs"]["succeeded"] == 3 and s,
                        60, "three jobs")
    assert state["files"] == 3 and state["refused"] == 0 and state["scanning"]
    assert sorted(p.name for p in (root / "out").iterdir()) == ["m0.tif", "m1.tif", "m2.tif"]
    for i in range(3):
        with mrcfile.open(root / "in" / f"m{i}.mrc") as src:
            np.testing.assert_array_equal(_tiff(root / "out" / f"m{i}.tif"), src.data.T)
    assert [w["name"] for w in client.get("/v1/watches", headers=AUTH).json()["watches"]] == ["incoming"]
    assert client.delete(location, headers=AUTH).status_code == 204
    assert_problem(client.get(location, headers=AUTH), 404, "watch-not-found")
    assert_problem(client.delete(location, headers=AUTH), 404, "watch-not-found")
    (root / "in" / "late.mrc").write_bytes(_mrc_bytes(root / "elsewhere", 5))
    time.sleep(1.5)
    assert not (root / "out" / "late.tif").exists()
    listed = client.get("/v1/jobs", headers=AUTH).json()["jobs"]
    assert len(listed) == 3 and {j["status"] for j in listed} == {"succeeded"}  # its jobs stay


def test_a_file_landing_before_inotify_watches_the_folder_is_taken(root, make_client, monkeypatch):
    """The scanner lists the folder, then inotify starts watching it: a file that lands in between is never reported
    by inotify, and is taken all the same (the folder is listed again once inotify watches)."""
    from noa_server import watches as watches_module

    arm = watches_module.watchfiles.watch

    def late_arming(folder, **options):
        (Path(folder) / "between.mrc").write_bytes(_mrc_bytes(root / "elsewhere", 4))  # after the first listing
        yield from arm(folder, **options)

    monkeypatch.setattr(watches_module.watchfiles, "watch", late_arming)
    client = make_client(data_root=root, api_key=KEY)
    response = client.post("/v1/watches", json=_watch(poll=False, settle_seconds=0.2), headers=AUTH)
    assert response.status_code == 201, response.text
    location = response.headers["location"]
    _wait_until(lambda: client.get(location, headers=AUTH).json()["jobs"]["succeeded"] == 1, 30, "its job")
    with mrcfile.open(root / "in" / "between.mrc") as src:
        np.testing.assert_array_equal(mrcfile.read(root / "out" / "between.mrc"), src.data.T)


def _tiff(path: Path) -> np.ndarray:
    import tifffile

    return tifffile.imread(path)


def test_a_file_is_taken_once_whoever_tries(root, make_client):
    """The lease and the UNIQUE constraint: a process that does not hold the watch takes nothing, and a file
    taken cannot be taken again (two scanners that both believe they hold the watch)."""
    from noa_server.watches import Scanner, WatchSpec

    client = make_client(data_root=root, api_key=KEY)
    service = client.app.state.service
    watch_id = client.post("/v1/watches", json=_watch(settle_seconds=3600), headers=AUTH).json()["id"]
    (root / "in" / "a.mrc").write_bytes(_mrc_bytes(root / "elsewhere", 1))
    # past its start, where it reads the taken files and submits their missing jobs (a.mrc's, mid-take, too)
    holder = _wait_until(lambda: (scanner := service.watches._scanners.get(watch_id)) and scanner._swept and scanner,
                         10, "the scanner's start")
    spec = WatchSpec.model_validate(_watch(settle_seconds=3600))
    other = Scanner(service.watches, watch_id, spec)  # as a second scanner of this process would
    other._take("in/a.mrc", 1, 1)
    holder._take("in/a.mrc", 1, 1)
    with service.jobs.db.read() as conn:
        rows = conn.execute(sa.select(taken.c.path, taken.c.job_id)).all()
    assert len(rows) == 1 and rows[0].job_id is not None
    wait_job(client, f"/v1/jobs/{rows[0].job_id}", headers=AUTH)
    assert len(client.get("/v1/jobs", headers=AUTH).json()["jobs"]) == 1
    with service.jobs.db.write() as conn:  # the lease is someone else's now
        conn.execute(sa.update(watches).values(holder="f" * 32, heartbeat=time.time()))
    (root / "in" / "b.mrc").write_bytes(_mrc_bytes(root / "elsewhere", 2))
    holder._take("in/b.mrc", 1, 1)
    assert holder.halt.is_set()  # it stops scanning
    with service.jobs.db.read() as conn:
        assert conn.execute(sa.select(taken.c.path)).scalars().all() == ["in/a.mrc"]


def test_a_take_whose_lease_changes_hands_before_its_job_makes_one_job(root, make_client):
    """The holder took a.mrc and lost the lease before submitting its job; the next holder, finding the file
    without a job, submits it; then the first submits too. Both submit the id the take gives: one job."""
    from noa_server import jobs as job_module
    from noa_server.watches import Scanner, WatchSpec, job_id_of

    client = make_client(data_root=root, api_key=KEY)
    service = client.app.state.service
    watch_id = client.post("/v1/watches", json=_watch(settle_seconds=3600), headers=AUTH).json()["id"]
    holder = _wait_until(lambda: (scanner := service.watches._scanners.get(watch_id)) and scanner._swept and scanner,
                         10, "the scanner's start")
    (root / "in" / "a.mrc").write_bytes(_mrc_bytes(root / "elsewhere", 1))
    stamp = job_module._now()
    with service.jobs.db.write() as conn:  # the holder's take, its job not submitted yet
        conn.execute(sa.insert(taken).values(watch_id=watch_id, path="in/a.mrc", size=1, mtime_ns=1, taken=stamp))
        row = conn.execute(sa.select(taken).where(taken.c.path == "in/a.mrc")).one()
    successor = Scanner(service.watches, watch_id, WatchSpec.model_validate(_watch(settle_seconds=3600)))
    successor._recover([row])
    holder._submit("in/a.mrc", stamp)
    job_id = job_id_of(watch_id, "in/a.mrc", stamp)
    with service.jobs.db.read() as conn:
        assert conn.execute(sa.select(taken.c.job_id, taken.c.error)).all() == [(job_id, None)]
        assert conn.execute(sa.select(jobs.c.id)).scalars().all() == [job_id]
    assert wait_job(client, f"/v1/jobs/{job_id}", headers=AUTH)["status"] == "succeeded"
    with mrcfile.open(root / "out" / "a.mrc") as out:
        np.testing.assert_array_equal(out.data, _data(1).T)


def test_the_next_holder_finishes_what_a_dead_one_left(root, make_client):
    """A process died after taking a.mrc (no job yet), after submitting c.mrc's job (not linked yet), and while
    b.mrc's job ran (interrupted). The next holder submits a's job, links c's, resumes b's: one job each."""
    from noa_server import jobs as job_module
    from noa_server.watches import Watches, WatchSpec, job_id_of

    client = make_client(data_root=root, api_key=KEY)
    service = client.app.state.service
    watch_id = client.post("/v1/watches", json=_watch(settle_seconds=3600), headers=AUTH).json()["id"]
    _wait_until(lambda: service.watches._scanners.get(watch_id), 10, "the scanner")
    service.watches.stop()  # as if its process had died: no scanner, the lease given back
    spec, rules = WatchSpec.model_validate(_watch(settle_seconds=3600)), service.watches.rules
    for i, name in enumerate("abc"):
        (root / "in" / f"{name}.mrc").write_bytes(_mrc_bytes(root / "elsewhere", i))
    stamps = {name: job_module._now() for name in "abc"}
    # c's job has the id its take gives it in every process; b's, linked already, any id
    ids = {"b": uuid.uuid4().hex, "c": job_id_of(watch_id, "in/c.mrc", stamps["c"])}
    with service.jobs.db.write() as conn:
        for name, status in (("b", "running"), ("c", "succeeded")):
            request = rules.request(spec, f"in/{name}.mrc").model_dump(mode="json")  # as a watch records it
            conn.execute(sa.insert(jobs).values(
                id=ids[name], operation="permute", request=request, status=status, done=0, total=0,
                created=job_module._now(), owner_host=job_module.HOST_ID, owner_pid=0, owner_start="",
                owner_token="gone", heartbeat=0.0))
        for name in "abc":
            conn.execute(sa.insert(taken).values(watch_id=watch_id, path=f"in/{name}.mrc", size=1, mtime_ns=1,
                                                 taken=stamps[name], job_id=ids["b"] if name == "b" else None))
    successor = Watches(service.jobs, rules, service.start_job, service.job_work)
    successor.start()
    try:
        location = f"/v1/watches/{watch_id}"
        _wait_until(lambda: client.get(location, headers=AUTH).json()["jobs"]["succeeded"] == 3, 60, "three jobs")
    finally:
        successor.stop()
    with service.jobs.db.read() as conn:
        linked = dict(conn.execute(sa.select(taken.c.path, taken.c.job_id)).all())
        assert len(conn.execute(sa.select(jobs.c.id)).all()) == 3
    assert linked["in/b.mrc"] == ids["b"] and linked["in/c.mrc"] == ids["c"] and linked["in/a.mrc"] not in ids.values()
    for i, name in enumerate("ab"):  # c's output was its (stand-in) job's to write
        with mrcfile.open(root / "out" / f"{name}.mrc") as out:
            np.testing.assert_array_equal(out.data, _data(i).T)


BAD_CONFIGS = [
    ({"watches": [_watch(), _watch()]}, "watch 2 (incoming): name: another watch of the file"),
    ({"watches": [_watch(folder="../up")]}, "watch 1 (incoming): folder: '../up': '..' is not allowed"),
    ({"watches": [{**_watch(), "settle_seconds": "2"}]}, "watch 1 (incoming): settle_seconds: Input should be"),
    ([_watch(job={"operation": "permute"})], "watch 1 (incoming): job.axes: Field required"),  # a list alone
    ({"watch": []}, "expected a list of watches"),
]


def test_bad_watch_configs_are_refused_naming_the_watch_and_field(root, make_client):
    from noa_server.watches import load_config

    rules = make_client(data_root=root).app.state.service.watches.rules
    path = root.parent / "watches.json"
    for config, message in BAD_CONFIGS:
        path.write_text(json.dumps(config))
        with pytest.raises(ValueError, match=r"^watch config ") as info:
            load_config(path, rules)
        assert str(path) in str(info.value) and message in str(info.value), (config, info.value)
    path.with_suffix(".toml").write_text("[[watches]]\nname = 'a'\nfolder = 'in'\n")
    with pytest.raises(ValueError, match=r"watch 1 \(a\): pattern: Field required"):
        load_config(path.with_suffix(".toml"), rules)


@pytest.mark.parametrize(("text", "message"), [
    (json.dumps({"watches": [_watch(job={"operation": "permute"})]}), "watch 1 (incoming): job.axes: Field required"),
    ("{not json", "not JSON"),
])
def test_noa_serve_refuses_a_bad_watch_config_clearly(root, text, message):
    path = root.parent / "watches.json"
    path.write_text(text)
    assert_user_error(noa("serve", "--data-root", root, "--watch", path, "--no-warmup"), str(path), message)


# -- the service, live -------------------------------------------------------------------------------------


class Acquisition(threading.Thread):
    """Writes ``count`` MRC files into ``folder`` as a microscope does: bursts of files at once, then files one by
    one a little apart; every tenth is written in two halves with a pause in between (longer than the poll, shorter
    than the settle time)."""

    def __init__(self, folder: Path, scratch: Path, count: int, pause: float = 0.15):
        super().__init__(daemon=True)
        self.folder, self.count, self.pause = folder, count, pause
        scratch.mkdir()
        self.contents = [_mrc_bytes(scratch, i) for i in range(count)]
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            i = 0
            while i < self.count:
                burst = 40 if (i // 40) % 2 == 0 else 1  # 40 at once, then 40 one by one
                for _ in range(min(40, self.count - i) if burst > 1 else 1):
                    self._write(i)
                    i += 1
                if burst == 1:
                    time.sleep(0.01)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def _write(self, i: int) -> None:
        content = self.contents[i]
        half = len(content) // 2 if i % 10 == 0 else 0
        with open(self.folder / f"m{i:03d}.mrc", "wb") as f:
            if half:
                f.write(content[:half])
                f.flush()
                time.sleep(self.pause)
            f.write(content[half:])
        self.written = i + 1


def _serve(root: Path, state: Path, config: Path, log: Path, database: str | None = None):
    args = ("--data-root", str(root), "--state-dir", str(state), "--watch", str(config), "--api-key", KEY,
            "--workers", "2", "--processes", "1", "--no-warmup", "--log-level", "warning",
            *(("--database", database) if database else ()))
    return start_server(None, log, args=args)


def _check_each_file_once(root: Path, count: int, database: str) -> set[int]:
    """Every file taken once, as one job that succeeded, whose output is the file transposed; the pids of the
    processes that ran the jobs."""
    db = Database(database)
    try:
        with db.read() as conn:
            rows = conn.execute(sa.select(taken.c.path, taken.c.job_id, taken.c.error)).all()
            job_rows = conn.execute(sa.select(jobs.c.id, jobs.c.status, jobs.c.request, jobs.c.owner_pid)).all()
    finally:
        db.close()
    assert sorted(r.path for r in rows) == [f"in/m{i:03d}.mrc" for i in range(count)]
    assert all(r.error is None for r in rows)
    assert len(job_rows) == count and {j.id for j in job_rows} == {r.job_id for r in rows}
    assert {j.status for j in job_rows} == {"succeeded"}
    assert sorted(j.request["src"] for j in job_rows) == sorted(r.path for r in rows)
    assert sorted(p.name for p in (root / "out").iterdir()) == [f"m{i:03d}.mrc" for i in range(count)]
    for i in range(count):
        with mrcfile.open(root / "out" / f"m{i:03d}.mrc") as out:
            np.testing.assert_array_equal(out.data, _data(i).T)
    return {j.owner_pid for j in job_rows}


def _succeeded_by(database: str, pid: int) -> bool:
    """Whether the process ``pid`` has run a job of the watch to success."""
    db = Database(database)
    try:
        with db.read() as conn:
            return conn.execute(sa.select(jobs.c.id).where(jobs.c.owner_pid == pid, jobs.c.status == "succeeded")
                                .limit(1)).first() is not None
    finally:
        db.close()


def _wait_for_jobs(url: str, count: int, timeout: float = 90) -> None:
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as client:
        watch = client.get("/v1/watches").json()["watches"][0]["id"]
        _wait_until(lambda: client.get(f"/v1/watches/{watch}").json()["jobs"]["succeeded"] == count, timeout,
                    f"{count} jobs succeeded")


@pytest.mark.slow  # 35-240 s: scripts/test runs it after the rest
def test_a_watch_takes_each_of_500_files_once_across_a_restart(tmp_path):
    root, state = tmp_path / "root", tmp_path / "state"
    (root / "in").mkdir(parents=True)
    config = tmp_path / "watches.toml"  # TOML this time (the other tests: JSON)
    config.write_text('[[watches]]\nname = "incoming"\nfolder = "in"\npattern = "*.mrc"\noutput = "out"\n'
                      'settle_seconds = 0.3\npoll = true\npoll_seconds = 0.05\n'
                      '[watches.job]\noperation = "permute"\naxes = [0, 1, 3, 2]\n')
    acquisition = Acquisition(root / "in", tmp_path / "scratch", 500)
    proc, url = _serve(root, state, config, tmp_path / "a.log")
    try:
        acquisition.start()
        _wait_until(lambda: acquisition.written >= 150, 60, "150 files written")
        stop_server(proc)  # stopped mid-stream (its running jobs are interrupted) and started again
        proc, url = _serve(root, state, config, tmp_path / "b.log")
        acquisition.join(120)
        assert acquisition.error is None and acquisition.written == 500
        _wait_for_jobs(url, 500)
    finally:
        stop_server(proc)
    _check_each_file_once(root, 500, sqlite_url(state))
    for i in (0, 7):  # the CLI writes the same outputs
        noa_out = tmp_path / f"cli{i}.mrc"
        assert noa("permute", root / "in" / f"m{i:03d}.mrc", noa_out, "--axes", "0,1,3,2", cwd=REPO).returncode == 0
        with mrcfile.open(noa_out) as expected, mrcfile.open(root / "out" / f"m{i:03d}.mrc") as got:
            np.testing.assert_array_equal(got.data, expected.data)
            assert got.data.dtype == expected.data.dtype


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_two_services_share_a_watch(tmp_path, backend, request):
    """Two services on one database (one state folder for SQLite; two hosts' for PostgreSQL), both with the watch:
    the first scans it; stopped mid-stream, it hands the watch to the second. Each file once."""
    root = tmp_path / "root"
    (root / "in").mkdir(parents=True)
    database = request.getfixturevalue("pg_database") if backend == "postgres" else None
    config = tmp_path / "watches.json"
    config.write_text(json.dumps({"watches": [_watch()]}))
    states = [tmp_path / "state", tmp_path / ("state" if database is None else "state-b")]
    acquisition = Acquisition(root / "in", tmp_path / "scratch", 100)
    procs = []
    try:
        first, url = _serve(root, states[0], config, tmp_path / "a.log", database)
        procs.append(first)
        with httpx.Client(base_url=url, headers=AUTH, timeout=30) as client:
            _wait_until(lambda: client.get("/v1/watches").json()["watches"][0]["scanning"], 30, "the first scans")
        second, url = _serve(root, states[1], config, tmp_path / "b.log", database)
        procs.append(second)
        acquisition.start()
        _wait_until(lambda: acquisition.written >= 50, 60, "50 files written")
        # under load the first may not have finished a job yet: then the second would run them all
        _wait_until(lambda: _succeeded_by(database or sqlite_url(states[0]), first.pid), 60, "the first runs a job")
        stop_server(first)
        acquisition.join(60)
        assert acquisition.error is None and acquisition.written == 100
        _wait_for_jobs(url, 100)
    finally:
        for proc in procs:
            stop_server(proc)
    assert _check_each_file_once(root, 100, database or sqlite_url(states[0])) == {first.pid, second.pid}


def test_the_example_map_is_taken_from_a_config_of_a_report(tmp_path):
    """A report (stats) writes nothing: its result is the job's, as POST /v1/jobs gives it."""
    root = tmp_path / "root"
    (root / "in").mkdir(parents=True)
    config = tmp_path / "watches.json"
    config.write_text(json.dumps([{**_watch(pattern="*.map", job={"operation": "stats"}), "output": None}]))
    proc, url = _serve(root, tmp_path / "state", config, tmp_path / "log")
    try:
        shutil.copy(EXAMPLE_MAP, root / "in" / "emd.map")
        with httpx.Client(base_url=url, headers=AUTH, timeout=30) as client:
            job = _wait_until(lambda: client.get("/v1/jobs").json()["jobs"], 30, "a job")[0]
            result = wait_job(client, f"/v1/jobs/{job['id']}")["result"]
            direct = client.post("/v1/paths/stats", json={"path": "in/emd.map"}).json()
    finally:
        stop_server(proc)
    assert job["request"]["path"] == "in/emd.map" and result == direct
    with mrcfile.open(EXAMPLE_MAP) as f:
        assert result["mean"] == pytest.approx(float(np.mean(f.data, dtype=np.float64)), rel=1e-6)
