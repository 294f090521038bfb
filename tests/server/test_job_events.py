"""Following a job over Server-Sent Events (GET /v1/jobs/{id}/events), against real `noa serve` processes.

Two services on one data root and one state folder (one SQLite database), as two processes of a host are: a
job submitted to one is followed through either. Each runs one job at a time (``--workers 1``), so a job
submitted behind a long one is seen queued before it runs.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import pytest

from helpers import EXAMPLE_MAP, assert_problem, start_server, stop_server, wait_job
from noa_server.jobs import Follower
from noa_server.routes import jobs as job_routes

KEY = "events-test-key"
AUTH = {"X-API-Key": KEY}
LONG = [8000, 20, 20, 20]  # 256 MB written in 32 tiles: long enough to be followed, and cancelled
FOLLOWED = [4000, 20, 20, 20]  # 16 tiles


@dataclass
class Services:
    root: Path
    a: str
    b: str
    proc_a: subprocess.Popen


@pytest.fixture(scope="module")
def services(tmp_path_factory) -> Iterator[Services]:
    base = tmp_path_factory.mktemp("events")
    root = base / "root"
    root.mkdir()
    shutil.copy(EXAMPLE_MAP, root / "emd.map")
    started = []
    try:
        for name in ("a", "b"):
            args = ("--data-root", str(root), "--state-dir", str(base / "state"), "--api-key", KEY, "--workers", "1",
                    "--processes", "1", "--no-warmup", "--log-level", "warning")
            started.append(start_server(None, base / f"{name}.log", args=args))
        yield Services(root, started[0][1], started[1][1], started[0][0])
    finally:
        for proc, _ in started:
            stop_server(proc)


def _client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers=AUTH, timeout=60)


def _submit(client: httpx.Client, dst: str, shape: list[int]) -> str:
    response = client.post("/v1/jobs", json={"operation": "broadcast", "src": "emd.map", "dst": dst, "shape": shape,
                                             "overwrite": True})
    assert response.status_code == 202, response.text
    return response.headers["location"]


def _events(response: httpx.Response) -> Iterator[dict]:
    """The events of an open stream as they come: {"event", "id", "data"} (comments skipped)."""
    assert response.status_code == 200, response.read()
    assert response.headers["content-type"].startswith("text/event-stream")
    fields: dict = {}
    for line in response.iter_lines():
        if line == "":
            if fields:
                yield {**fields, "data": json.loads(fields["data"])}
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value


def _follow(client: httpx.Client, location: str, **headers: str) -> list[dict]:
    with client.stream("GET", f"{location}/events", headers=headers) as response:
        return list(_events(response))


@contextlib.contextmanager
def _stepped(proc: subprocess.Popen) -> Iterator[None]:
    """``proc`` runs in short slices (SIGCONT, then SIGSTOP for longer than a follower's poll), as a busy host
    would: this machine writes a whole output faster than a follower polls, and each slice makes some progress."""
    done = threading.Event()

    def step() -> None:
        while not done.is_set():
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.02)
            proc.send_signal(signal.SIGSTOP)
            done.wait(0.4)
        proc.send_signal(signal.SIGCONT)

    stepping = threading.Thread(target=step)
    stepping.start()
    try:
        yield
    finally:
        done.set()
        stepping.join()


def _check_sequence(events: list[dict], client: httpx.Client, location: str) -> list[int]:
    """States in order, progress monotone, ended by the result that GET .../result gives; the progress seen."""
    states = [e["data"]["status"] for e in events if e["event"] == "state"]
    assert states == ["queued", "running", "succeeded"], [e["event"] for e in events]
    seen = [e["data"]["progress"]["done"] if e["event"] == "state" else e["data"]["done"]
            for e in events if e["event"] in ("state", "progress")]
    assert seen == sorted(seen)
    assert [e["event"] for e in events[-2:]] == ["state", "result"]
    assert events[-1]["data"] == client.get(f"{location}/result").json()
    progress = events[-2]["data"]["progress"]
    assert progress["done"] == progress["total"] > 1
    assert len({e["id"] for e in events}) == len(events)
    return [e["data"]["done"] for e in events if e["event"] == "progress"]


def test_a_followed_job_sends_its_states_progress_and_result_in_order(services):
    with _client(services.a) as a:
        blocker = _submit(a, "long.mrc", LONG)
        # queued behind the blocker (one worker), and as long: its follower, which polls, sees it run
        location = _submit(a, "followed.mrc", LONG)
        events = _follow(a, location)
        _check_sequence(events, a, location)
        assert events[-1]["data"] == {"output": "followed.mrc", "notices": []}
        wait_job(a, blocker)


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
def test_a_follower_on_another_service_process_sees_the_same_events(services):
    """Submitted to A, followed on B: B reads the job from the database it shares with A, progress included."""
    with _client(services.a) as a, _client(services.b) as b:
        blocker = _submit(a, "long.mrc", LONG)
        location = _submit(a, "other.mrc", FOLLOWED)
        with _stepped(services.proc_a):
            on_b = _follow(b, location)
        # progress recorded by A, read by B (how many the polls catch depends on the machine's load: one at least)
        assert len(_check_sequence(on_b, b, location)) >= 1
        on_a = _follow(a, location)  # now that it ended: its state and result, as B saw them
        assert [(e["event"], e["data"]) for e in on_a] == [(e["event"], e["data"]) for e in on_b[-2:]]
        wait_job(a, blocker)


def test_a_job_cancelled_while_followed_ends_the_stream_with_its_state(services):
    """Followed on B, cancelled through B while A runs it (in slices, so that it is seen in the middle)."""
    with _client(services.a) as a, _client(services.b) as b:
        location = _submit(a, "cancelled.mrc", LONG)
        seen = []
        with _stepped(services.proc_a), b.stream("GET", f"{location}/events") as response:
            for event in _events(response):
                seen.append(event)
                if event["event"] == "progress" and event["data"]["done"] < event["data"]["total"]:
                    assert b.delete(location).status_code == 202
        assert seen[-1]["event"] == "state" and seen[-1]["data"]["status"] == "cancelled", seen
        assert seen[-1]["id"].endswith(".end")
        assert [e["data"]["status"] for e in seen if e["event"] == "state"][-2:] == ["running", "cancelled"]
        deadline = time.monotonic() + 30
        while any(p.name.startswith(".cancelled") for p in services.root.iterdir()):  # A stops and cleans up
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert not (services.root / "cancelled.mrc").exists()


def test_reconnecting_with_last_event_id_resumes_without_repeating(services):
    with _client(services.a) as a:
        location = _submit(a, "resumed.mrc", FOLLOWED)
        with a.stream("GET", f"{location}/events") as response:
            first = next(_events(response))  # then the connection drops
        assert first["event"] == "state"
        rest = _follow(a, location, **{"Last-Event-ID": first["id"]})
        assert first["data"]["status"] not in [e["data"]["status"] for e in rest if e["event"] == "state"]
        progress = [e["data"]["done"] for e in rest if e["event"] == "progress"]
        assert all(done > first["data"]["progress"]["done"] for done in progress)
        assert rest[-2]["data"]["status"] == "succeeded" and rest[-1]["event"] == "result"
        # the last state received, not the result: the result alone; everything received: 204, nothing to repeat
        assert [e["event"] for e in _follow(a, location, **{"Last-Event-ID": rest[-2]["id"]})] == ["result"]
        assert a.get(f"{location}/events", headers={"Last-Event-ID": rest[-1]["id"]}).status_code == 204


def test_events_of_an_unknown_job_are_a_404_problem_and_the_route_is_documented(services):
    with _client(services.a) as a:
        assert_problem(a.get(f"/v1/jobs/{'0' * 32}/events"), 404, "job-not-found")
        route = a.get("/openapi.json").json()["paths"]["/v1/jobs/{job_id}/events"]["get"]
        assert "text/event-stream" in route["responses"]["200"]["content"]
        assert "404" in route["responses"]


def test_a_quiet_stream_sends_a_keep_alive_comment(monkeypatch):
    """A comment after KEEPALIVE_S without an event (here 0.2 s; the job reads the same for 20 polls of 0.02 s)."""
    monkeypatch.setattr(job_routes, "KEEPALIVE_S", 0.2)
    monkeypatch.setattr(job_routes, "EVENTS_POLL_S", 0.02)
    running = {"status": "running", "progress": {"done": 1, "total": 2}, "result": None, "error": None}
    states = iter([running] * 20 + [{**running, "status": "succeeded", "progress": {"done": 2, "total": 2},
                                     "result": {"output": "x.mrc", "notices": []}}])

    class Store:
        def snapshot(self, job_id: str) -> dict:
            return next(states)

    async def follow() -> list[str]:
        return [chunk async for chunk in job_routes._stream(Store(), "id", Follower(), running)]

    chunks = anyio.run(follow)
    assert chunks[0].startswith("event: state\nid: running.1\n")
    assert ": keep-alive\n\n" in chunks[1:-2]
    assert chunks[-1] == 'event: result\nid: succeeded.2.end\ndata: {"output":"x.mrc","notices":[]}\n\n'
