"""Jobs: path operations that outlive the request that started them, with progress and cancellation.

Each job's state is one JSON file in the state directory, replaced atomically on every status
change, so a restart keeps finished results. Records of jobs finished longer ago than the store's
time to live are dropped (at start-up and whenever a job is submitted), so the store stays bounded. A job that was queued or running when the server
stopped is recorded as ``failed`` (``interrupted``): its output was never committed, because ops
writes atomically.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from server.problems import ProblemError, classify, internal_error, problem_body

log = logging.getLogger("noa.server")
ACTIVE = ("queued", "running")
ID_PATTERN = r"^[0-9a-f]{32}$"


class Cancelled(Exception):
    """Raised from the progress callback to stop a job between blocks."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _age_seconds(stamp: str) -> float:
    return (datetime.now(UTC) - datetime.fromisoformat(stamp.replace("Z", "+00:00"))).total_seconds()


@dataclass
class Job:
    id: str
    operation: str
    request: dict[str, Any]
    status: str = "queued"
    done: int = 0
    total: int = 0
    created: str = field(default_factory=_now)
    started: str | None = None
    finished: str | None = None
    result: Any = None
    error: dict[str, Any] | None = None
    cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    future: Future | None = field(default=None, repr=False)

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id, "operation": self.operation, "status": self.status,
            "cancel_requested": self.cancel.is_set() and self.status in ACTIVE,
            "progress": {"done": self.done, "total": self.total},
            "created": self.created, "started": self.started, "finished": self.finished,
            "request": self.request, "error": self.error, "result": self.result,
        }

    def progress(self, done: int, total: int) -> None:
        """The ops progress callback: record progress, or stop here when cancelled."""
        if self.cancel.is_set():
            raise Cancelled
        self.done, self.total = done, total


class JobStore:
    """Jobs by id, in memory and in ``directory``; ``submit`` hands the work to a worker pool."""

    def __init__(self, directory: Path, ttl_seconds: int = 0):
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ttl_seconds = ttl_seconds
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._stopping = False
        self._load()
        with self._lock:
            self._expire()

    def _load(self) -> None:
        for path in sorted(self.directory.glob("*.json")):
            try:
                data = json.loads(path.read_text())
                job = Job(**{k: data[k] for k in ("id", "operation", "request", "status", "created", "started",
                                                     "finished", "result", "error")},
                          done=data["progress"]["done"], total=data["progress"]["total"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable job state %s: %s", path, exc)
                continue
            if job.status in ACTIVE:
                self._interrupt(job)
                self._save(job)
            self._jobs[job.id] = job

    def _interrupt(self, job: Job) -> None:
        job.status, job.finished = "failed", _now()
        job.error = problem_body(500, "interrupted: the server stopped before the job finished; submit it again",
                                 f"/v1/jobs/{job.id}", slug="interrupted", title="Job interrupted")

    def _save(self, job: Job) -> None:
        if self._jobs.get(job.id) is not job:
            return  # deleted: a cancelled job winding down must not write its record back
        data = job.public()
        del data["cancel_requested"]
        temporary = self.directory / f".{job.id}.{threading.get_ident()}.tmp"
        temporary.write_text(json.dumps(data))
        os.replace(temporary, self.directory / f"{job.id}.json")

    def submit(self, operation: str, request: dict[str, Any], work: Callable[[Callable[[int, int], None]], Any],
               start: Callable[[Callable[[], None]], Future]) -> Job:
        """Record a job and start ``work(progress)`` through ``start`` (a worker pool's submit)."""
        job = Job(uuid.uuid4().hex, operation, request)
        with self._lock:
            if self._stopping:
                raise ProblemError(503, "shutting-down", "Shutting down", "the server is stopping; retry later")
            self._expire()
            self._jobs[job.id] = job
            self._save(job)
        job.future = start(lambda: self._run(job, work))
        return job

    def _run(self, job: Job, work: Callable[[Callable[[int, int], None]], Any]) -> None:
        with self._lock:
            if job.cancel.is_set():
                self._finish(job, "cancelled")
                return
            job.status, job.started = "running", _now()
            self._save(job)
        try:
            result = work(job.progress)
        except Cancelled:
            with self._lock:
                if self._stopping:
                    self._interrupt(job)
                    self._save(job)
                else:
                    self._finish(job, "cancelled")
            return
        except Exception as exc:  # noqa: BLE001 - a job records every failure instead of raising it
            problem = classify(exc)
            where = f"/v1/jobs/{job.id}"
            error = (problem_body(problem.status, problem.detail, where, slug=problem.slug, title=problem.title)
                     if problem else internal_error(exc, where))
            with self._lock:
                job.error = error
                self._finish(job, "failed")
            return
        with self._lock:
            job.result = result
            self._finish(job, "succeeded")

    def _expire(self) -> None:
        """Drop the records of jobs finished more than the time to live ago (the lock is held)."""
        if not self.ttl_seconds:
            return
        for job in [j for j in self._jobs.values() if j.finished and _age_seconds(j.finished) > self.ttl_seconds]:
            self._remove(job.id)

    def _remove(self, job_id: str) -> None:
        del self._jobs[job_id]
        (self.directory / f"{job_id}.json").unlink(missing_ok=True)

    def _finish(self, job: Job, status: str) -> None:
        job.status, job.finished = status, _now()
        self._save(job)

    def get(self, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise ProblemError(404, "job-not-found", "Job not found", f"no job {job_id}")
        return job

    def snapshot(self, job_id: str) -> dict[str, Any]:
        """The job's public state, taken under the lock: a state a client sees is already on disk."""
        with self._lock:
            return self.get(job_id).public()

    def cancel(self, job_id: str) -> dict[str, Any] | None:
        """Delete a job: an active one is also cancelled (it stops at its next block and its atomic
        output is never renamed into place). Returns the active job's last state, None for a finished one.
        """
        with self._lock:
            job = self.get(job_id)
            state = None
            if job.status in ACTIVE:
                job.cancel.set()
                if job.future is not None:
                    job.future.cancel()
                state = job.public()
            self._remove(job_id)
            return state

    def stop(self) -> None:
        """At shutdown: stop running jobs between blocks and record every active job as interrupted."""
        with self._lock:
            self._stopping = True
            for job in self._jobs.values():
                if job.status in ACTIVE:
                    job.cancel.set()
                    if job.future is not None and job.future.cancel():
                        self._interrupt(job)
                        self._save(job)

    def wait_idle(self, timeout: float) -> None:
        """Wait (bounded) for running jobs to notice the cancellation and record their state."""
        futures.wait([job.future for job in list(self._jobs.values()) if job.future is not None], timeout)
