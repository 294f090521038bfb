"""Jobs: path operations that outlive the request that started them, with progress and cancellation.

Every server process (``--processes``) answers for every job, because the state directory is the
truth: one JSON record per job, replaced atomically, and changed only under a lock file (``flock``).

- The process that runs a job (its owner) writes the record on every status change and, at most
  every ``PROGRESS_SAVE_S``, on progress. Until the job ends it answers from memory.
- Deleting a record cancels its job: the owner checks between blocks that the record still exists,
  and stops there. Its output is never committed, because ops write atomically.
- An active record whose owner process is gone (a crash, a restart) reads as ``failed``
  (``interrupted``) and is rewritten so. Owners are told apart by boot id, pid and process start
  time, so a recycled pid does not pass for the old process.
- Records of jobs finished longer ago than the time to live are removed, at start-up and at most
  once per ``min(ttl, 60 s)`` when a job is submitted, so the store stays bounded.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent import futures
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from noa_server.problems import ProblemError, classify, internal_error, problem_body

log = logging.getLogger("noa.server")
ACTIVE = ("queued", "running")
ID_PATTERN = r"^[0-9a-f]{32}$"
PROGRESS_SAVE_S = 0.5
EXPIRY_CHECK_S = 60.0
_RECORD_FIELDS = ("id", "operation", "request", "status", "created", "started", "finished", "result", "error")


class Cancelled(Exception):
    """Raised from the progress callback to stop a job between blocks."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _age_seconds(stamp: str) -> float:
    return (datetime.now(UTC) - datetime.fromisoformat(stamp.replace("Z", "+00:00"))).total_seconds()


# -- who owns a job ----------------------------------------------------------------------------------


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


_BOOT_ID = _boot_id()
_OPEN_STORES: set[str] = set()  # tokens of this process's stores that have not been stopped


def _process_tag(pid: int) -> str | None:
    """``boot:pid:start`` of the running process ``pid``, or None when no process has that pid."""
    try:
        start = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except OSError:
        if Path("/proc/self/stat").exists():
            return None
        try:  # no /proc (not Linux): the pid alone
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return f":{pid}:"
    return f"{_BOOT_ID}:{pid}:{start}"


def _owner_alive(owner: str) -> bool:
    """Whether the store ``owner`` (``boot:pid:start/token``) still runs its jobs."""
    process, _, token = owner.partition("/")
    try:
        pid = int(process.split(":")[1])
    except (IndexError, ValueError):
        return False
    if pid == os.getpid():  # this process: the store itself must still be open
        return token in _OPEN_STORES and process == _process_tag(pid)
    return process == _process_tag(pid)


# -- jobs --------------------------------------------------------------------------------------------


@dataclass
class Job:
    id: str
    operation: str
    request: dict[str, Any]
    owner: str = ""
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
    saved_at: float = field(default=0.0, repr=False)

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id, "operation": self.operation, "status": self.status,
            "cancel_requested": self.cancel.is_set() and self.status in ACTIVE,
            "progress": {"done": self.done, "total": self.total},
            "created": self.created, "started": self.started, "finished": self.finished,
            "request": self.request, "error": self.error, "result": self.result,
        }

    def record(self) -> dict[str, Any]:
        data = self.public()
        del data["cancel_requested"]
        return {**data, "owner": self.owner}

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> Job:
        return cls(**{k: data[k] for k in _RECORD_FIELDS}, owner=data.get("owner", ""),
                   done=data["progress"]["done"], total=data["progress"]["total"])


class JobStore:
    """Jobs in ``directory``, shared with the other processes that open it; ``submit`` hands the work
    to a worker pool of this process, which then owns the job."""

    def __init__(self, directory: Path, ttl_seconds: int = 0):
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ttl_seconds = ttl_seconds
        token = uuid.uuid4().hex
        self.owner = f"{_process_tag(os.getpid())}/{token}"
        self._token = token
        _OPEN_STORES.add(token)
        self._own: dict[str, Job] = {}  # the active jobs this store runs
        self._thread_lock = threading.Lock()
        self._lock_fd = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        self._stopping = False
        self._expired_at = 0.0
        with self._locked():
            self._recover()
            self._expire()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """This process's threads, then other processes (an flock on the directory's lock file)."""
        with self._thread_lock:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    # -- records (the lock is held) ------------------------------------------------------------------

    def _path(self, job_id: str) -> Path:
        return self.directory / f"{job_id}.json"

    def _write(self, job: Job) -> None:
        temporary = self.directory / f".{job.id}.{os.getpid()}.{threading.get_ident()}.tmp"
        temporary.write_text(json.dumps(job.record()))
        os.replace(temporary, self._path(job.id))
        job.saved_at = time.monotonic()

    def _read(self, job_id: str) -> Job | None:
        """The job from its record, with an orphaned active job recorded as interrupted."""
        try:
            job = Job.from_record(json.loads(self._path(job_id).read_text()))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable job state %s: %s", self._path(job_id), exc)
            return None
        if job.status in ACTIVE and not _owner_alive(job.owner):
            self._interrupt(job)
            self._write(job)
        return job

    def _recover(self) -> None:
        for path in sorted(self.directory.glob("*.json")):
            self._read(path.stem)

    def _expire(self) -> None:
        """Remove the records of jobs finished more than the time to live ago."""
        self._expired_at = time.monotonic()
        if not self.ttl_seconds:
            return
        oldest = time.time() - self.ttl_seconds
        for path in self.directory.glob("*.json"):
            try:
                if path.stat().st_mtime > oldest:  # written since: cannot have finished long enough ago
                    continue
            except FileNotFoundError:
                continue
            job = self._read(path.stem)
            if job is not None and job.finished and _age_seconds(job.finished) > self.ttl_seconds:
                path.unlink(missing_ok=True)

    def _interrupt(self, job: Job) -> None:
        job.status, job.finished = "failed", _now()
        job.error = problem_body(500, "interrupted: the server stopped before the job finished; submit it again",
                                 f"/v1/jobs/{job.id}", slug="interrupted", title="Job interrupted")

    def _finish(self, job: Job, status: str) -> None:
        job.status, job.finished = status, _now()
        self._end(job)

    def _end(self, job: Job) -> None:
        """Record how an owned job ended, unless its record was deleted (then it just ends)."""
        if self._path(job.id).exists():
            self._write(job)
        self._own.pop(job.id, None)

    # -- running -------------------------------------------------------------------------------------

    def submit(self, operation: str, request: dict[str, Any], work: Callable[[Callable[[int, int], None]], Any],
               start: Callable[[Callable[[], None]], Future]) -> Job:
        """Record a job and start ``work(progress)`` through ``start`` (a worker pool's submit)."""
        job = Job(uuid.uuid4().hex, operation, request, owner=self.owner)
        with self._locked():
            if self._stopping:
                raise ProblemError(503, "shutting-down", "Shutting down", "the server is stopping; retry later")
            if time.monotonic() - self._expired_at >= min(self.ttl_seconds or EXPIRY_CHECK_S, EXPIRY_CHECK_S):
                self._expire()
            self._own[job.id] = job
            self._write(job)
        job.future = start(lambda: self._run(job, work))
        return job

    def _run(self, job: Job, work: Callable[[Callable[[int, int], None]], Any]) -> None:
        with self._locked():
            if job.cancel.is_set() or not self._path(job.id).exists():
                self._finish(job, "cancelled")
                return
            job.status, job.started = "running", _now()
            self._write(job)
        try:
            result = work(lambda done, total: self._progress(job, done, total))
        except Cancelled:
            with self._locked():
                if self._stopping:
                    self._interrupt(job)
                    self._end(job)
                else:
                    self._finish(job, "cancelled")
            return
        except Exception as exc:  # noqa: BLE001 - a job records every failure instead of raising it
            problem = classify(exc)
            where = f"/v1/jobs/{job.id}"
            error = (problem_body(problem.status, problem.detail, where, slug=problem.slug, title=problem.title)
                     if problem else internal_error(exc, where))
            with self._locked():
                job.error = error
                self._finish(job, "failed")
            return
        with self._locked():
            job.result = result
            self._finish(job, "succeeded")

    def _progress(self, job: Job, done: int, total: int) -> None:
        """The ops progress callback: record progress, or stop here when the job was cancelled or deleted."""
        if job.cancel.is_set():
            raise Cancelled
        job.done, job.total = done, total
        if not self._path(job.id).exists():  # deleted through another process
            job.cancel.set()
            raise Cancelled
        if time.monotonic() - job.saved_at >= PROGRESS_SAVE_S:
            with self._locked():
                if self._path(job.id).exists():
                    self._write(job)

    # -- answering -----------------------------------------------------------------------------------

    def _get(self, job_id: str) -> Job:
        job = self._own.get(job_id) or self._read(job_id)
        if job is None:
            raise ProblemError(404, "job-not-found", "Job not found", f"no job {job_id}")
        return job

    def get(self, job_id: str) -> Job:
        """The job: from memory while this store runs it, else from its record."""
        with self._locked():
            return self._get(job_id)

    def snapshot(self, job_id: str) -> dict[str, Any]:
        """The job's public state, taken under the lock: a state a client sees is already on disk
        (progress excepted, which is saved every PROGRESS_SAVE_S)."""
        with self._locked():
            return self._get(job_id).public()

    def cancel(self, job_id: str) -> dict[str, Any] | None:
        """Delete a job: an active one is also cancelled (it stops at its next block and its atomic
        output is never renamed into place). Returns the active job's last state, None for a finished one.
        """
        with self._locked():
            job = self._get(job_id)
            state = None
            if job.status in ACTIVE:
                job.cancel.set()  # the owner sees it directly, or (another process) through the missing record
                if job.future is not None:
                    job.future.cancel()
                state = job.public()
            self._own.pop(job_id, None)
            self._path(job_id).unlink(missing_ok=True)
            return state

    def stop(self) -> None:
        """At shutdown: stop running jobs between blocks and record every active job as interrupted."""
        with self._locked():
            self._stopping = True
            _OPEN_STORES.discard(self._token)
            for job in list(self._own.values()):
                job.cancel.set()
                if job.future is not None and job.future.cancel():
                    self._interrupt(job)
                    self._end(job)

    def busy(self) -> bool:
        """Whether this process runs (or has queued) a job."""
        with self._locked():
            return any(job.status in ACTIVE for job in self._own.values())

    def wait_idle(self, timeout: float) -> None:
        """Wait (bounded) for running jobs to notice the cancellation and record their state."""
        futures.wait([job.future for job in list(self._own.values()) if job.future is not None], timeout)
