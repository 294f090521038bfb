"""Jobs: path operations that outlive the request that started them, with progress and cancellation.

Every server process (``--processes``), on every host that shares the database (``--database``),
answers for every job: the database (:mod:`noa_server.job_db`) is the truth, and every change of a
job's state is one transaction.

- The store that submitted a job owns it and alone runs it: each of its writes is an UPDATE that
  names the owner and an active state, so a store that lost the job (deleted, or declared
  interrupted) cannot write it back. It writes progress at most every ``PROGRESS_SAVE_S`` and
  refreshes the job's heartbeat every ``HEARTBEAT_S`` (from a thread) and with progress.
- Deleting a job's row cancels it: the owner looks for the row at each progress call (and each
  heartbeat) and stops at its next block. Its output is never committed, because ops write atomically.
- An active job whose owner is gone reads as ``failed`` (``interrupted``), written once by a
  conditional UPDATE whichever store sees it first. On the owner's host this is known exactly (boot
  id, pid and process start time, so a recycled pid does not pass for the old process); from
  another host, by a heartbeat older than the lease. ``resume`` runs an interrupted job again.
- Rows of jobs finished longer ago than the time to live are removed, at start-up and at most
  once per ``min(ttl, 60 s)`` when a job is submitted, so the store stays bounded.
- The JSON records of earlier versions (``<id>.json`` in the state directory) are imported when a
  store opens the directory, and moved to ``imported/``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, get_args

import sqlalchemy as sa

from noa_server.job_db import Database, jobs, sqlite_url
from noa_server.problems import TYPE_PREFIX, ProblemError, classify, internal_error, problem_body

log = logging.getLogger("noa.server")
ACTIVE = ("queued", "running")
JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
STATES = get_args(JobState)
ID_PATTERN = r"^[0-9a-f]{32}$"
CURSOR_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z_[0-9a-f]{32}$"  # a job's created stamp, its id
PROGRESS_SAVE_S = 0.5
HEARTBEAT_S = 2.0
LEASE_S = 15.0
EXPIRY_CHECK_S = 60.0
INTERRUPTED = "interrupted"


class Cancelled(Exception):
    """Raised from the progress callback to stop a job between blocks."""


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _now() -> str:
    return _stamp(datetime.now(UTC))


def since_stamp(moment: datetime) -> str:
    """The stamp from which jobs created at or after ``moment`` (naive: UTC) sort: stamps have milliseconds,
    so a moment between two is rounded up."""
    moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    try:
        return _stamp(moment + timedelta(microseconds=-moment.microsecond % 1000))
    except OverflowError:  # at an end of datetime's range: before every stamp, or after
        return "" if moment.year == 1 else "~"


# -- who owns a job ----------------------------------------------------------------------------------


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


_BOOT_ID = _boot_id()
HOST_ID = f"{socket.gethostname()}/{_BOOT_ID}"
_OPEN_STORES: set[str] = set()  # tokens of this process's stores that have not been stopped


def _process_start(pid: int) -> str | None:
    """The start time of the running process ``pid`` ("" where there is no /proc), None when no process has it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except OSError:
        if Path("/proc/self/stat").exists():
            return None
        try:  # no /proc (not Linux): the pid alone
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ""


def _interrupted_error(job_id: str) -> dict[str, Any]:
    return problem_body(500, "interrupted: the server stopped before the job finished; submit it again",
                        f"/v1/jobs/{job_id}", slug=INTERRUPTED, title="Job interrupted")


# -- jobs --------------------------------------------------------------------------------------------


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
    saved_at: float = field(default=0.0, repr=False)

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id, "operation": self.operation, "status": self.status,
            "cancel_requested": self.cancel.is_set() and self.status in ACTIVE,
            "progress": {"done": self.done, "total": self.total},
            "created": self.created, "started": self.started, "finished": self.finished,
            "request": self.request, "error": self.error, "result": self.result,
        }

    def row(self) -> dict[str, Any]:
        return {"id": self.id, "operation": self.operation, "request": self.request, "status": self.status,
                "done": self.done, "total": self.total, "created": self.created, "started": self.started,
                "finished": self.finished, "result": self.result, "error": self.error}

    @classmethod
    def from_row(cls, row: sa.Row) -> Job:
        return cls(row.id, row.operation, row.request, row.status, row.done, row.total, row.created, row.started,
                   row.finished, row.result, row.error)

    @property
    def interrupted(self) -> bool:
        return self.status == "failed" and (self.error or {}).get("type") == TYPE_PREFIX + INTERRUPTED


def encode_cursor(created: str, job_id: str) -> str:
    """Where a page ends, for the next to start: every string of CURSOR_PATTERN is one (a position in the order)."""
    return f"{created}_{job_id}"


def decode_cursor(cursor: str) -> tuple[str, str]:
    created, _, job_id = cursor.partition("_")
    return created, job_id


# -- following a job (Server-Sent Events) ----------------------------------------------------------

EVENT_ID = re.compile(r"^(queued|running|succeeded|failed|cancelled)\.(\d+)(\.end)?$")
Event = tuple[str, str, Any]  # (event name, id, data)


@dataclass
class Follower:
    """What one follower of a job was sent, and the events that bring it up to a newer state of the job.

    Each event's id says where the follower then is, ``STATUS.DONE``, and ``STATUS.DONE.end`` once the last was
    sent; a reconnection names it (``Last-Event-ID``) and resumes without repeating, with nothing kept between
    connections. A state change is a ``state`` event (the job's public state), a change of progress alone a
    ``progress`` event; the end is ``result`` (succeeded) or ``error`` (failed); a cancelled job ends with its
    ``state``.
    """

    status: str | None = None
    done: int | None = None
    ended: bool = False
    last: dict[str, Any] | None = None

    @classmethod
    def resuming(cls, last_event_id: str | None) -> Follower:
        """Where the event ``last_event_id`` left a follower (anything else: at the start)."""
        match = EVENT_ID.match(last_event_id or "")
        return cls() if match is None else cls(match[1], int(match[2]), match[3] is not None)

    def events(self, job: dict[str, Any] | None) -> list[Event]:
        """The events from what was sent to ``job`` (None: the job was deleted, which cancels an active one)."""
        if job is None:
            assert self.last is not None  # a follower starts from a job that exists
            job = {**self.last, "status": "cancelled", "cancel_requested": False}
        self.last = job
        status, done = job["status"], job["progress"]["done"]
        events: list[Event] = []
        if status != self.status:
            self.status, self.done = status, done
            events.append(("state", self._id(ends=status == "cancelled"), job))
        elif done != self.done:
            self.done = done
            events.append(("progress", self._id(), job["progress"]))
        if status == "succeeded":
            events.append(("result", self._id(ends=True), job["result"]))
        elif status == "failed":
            events.append(("error", self._id(ends=True), job["error"]))
        self.ended = status not in ACTIVE
        return events

    def _id(self, *, ends: bool = False) -> str:
        return f"{self.status}.{self.done}{'.end' if ends else ''}"


class JobStore:
    """Jobs in a database (``database``: an SQLAlchemy URL; None: SQLite in ``directory``), shared with the
    other stores that open it; ``submit`` hands the work to a worker pool of this process, which then owns
    the job. An active job of another host reads as interrupted once its heartbeat is ``lease_seconds`` old."""

    def __init__(self, directory: Path, ttl_seconds: int = 0, *, database: str | None = None,
                 lease_seconds: float = LEASE_S):
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.db = Database(database or sqlite_url(directory))
        self.ttl_seconds = ttl_seconds
        self.lease_seconds = lease_seconds
        self._token = uuid.uuid4().hex
        _OPEN_STORES.add(self._token)
        self._owner = {"owner_host": HOST_ID, "owner_pid": os.getpid(),
                       "owner_start": _process_start(os.getpid()) or "", "owner_token": self._token}
        self._own: dict[str, Job] = {}  # the active jobs this store runs
        self._lock = threading.Lock()  # guards _own and _stopping
        self._stopping = False
        self._expired_at = 0.0
        self._beat_stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._import_records()
        self._settle_active()
        self._expire()

    # -- rows ----------------------------------------------------------------------------------------

    def _select(self, job_id: str) -> sa.Row | None:
        with self.db.read() as conn:
            return conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).first()

    def _owner_alive(self, row: sa.Row) -> bool:
        """Whether the store that owns ``row`` still runs it: on this host its process says; from another host
        only the heartbeat can."""
        if row.owner_host != HOST_ID:
            return time.time() - row.heartbeat < self.lease_seconds
        if row.owner_pid == os.getpid():  # this process: the store itself must still be open
            return row.owner_token in _OPEN_STORES and row.owner_start == self._owner["owner_start"]
        return _process_start(row.owner_pid) == row.owner_start

    def _interrupt_orphan(self, row: sa.Row) -> None:
        """Record an active job whose owner is gone as interrupted: one UPDATE that only the first store to see
        it makes (it names the owner, an active state and, for another host's job, the stale heartbeat)."""
        where = [jobs.c.id == row.id, jobs.c.status.in_(ACTIVE), jobs.c.owner_token == row.owner_token]
        if row.owner_host != HOST_ID:
            where.append(jobs.c.heartbeat < time.time() - self.lease_seconds)
        with self.db.write() as conn:
            changed = conn.execute(sa.update(jobs).where(*where).values(
                status="failed", finished=_now(), error=_interrupted_error(row.id))).rowcount
        if changed:
            log.warning("job %s interrupted: its owner (%s, pid %s) is gone", row.id, row.owner_host, row.owner_pid)

    def _settled(self, row: sa.Row | None) -> sa.Row | None:
        if row is not None and row.status in ACTIVE and not self._owner_alive(row):
            self._interrupt_orphan(row)
            return self._select(row.id)
        return row

    def _settle_active(self) -> None:
        """Record every orphaned active job as interrupted (before a listing filters by state)."""
        with self.db.read() as conn:
            rows = conn.execute(sa.select(jobs.c.id, jobs.c.status, jobs.c.owner_host, jobs.c.owner_pid,
                                          jobs.c.owner_start, jobs.c.owner_token, jobs.c.heartbeat)
                                .where(jobs.c.status.in_(ACTIVE))).all()
        for row in rows:
            if not self._owner_alive(row):
                self._interrupt_orphan(row)

    def _save(self, job: Job, **values: Any) -> bool:
        """Write ``values`` of an owned job; False when the job is no longer this store's to write (its row was
        deleted, or it was declared interrupted)."""
        with self.db.write() as conn:
            return conn.execute(sa.update(jobs).where(
                jobs.c.id == job.id, jobs.c.owner_token == self._token, jobs.c.status.in_(ACTIVE)
            ).values(**values)).rowcount == 1

    def _still_owned(self, job: Job) -> bool:
        with self.db.read() as conn:
            return conn.execute(sa.select(jobs.c.id).where(
                jobs.c.id == job.id, jobs.c.owner_token == self._token, jobs.c.status.in_(ACTIVE))).first() is not None

    def _import_records(self) -> None:
        """Import the JSON job records of earlier versions once, moving each (imported or unreadable) to imported/."""
        records = sorted(self.directory.glob("*.json"))
        if records:
            (self.directory / "imported").mkdir(exist_ok=True)
        for path in records:
            try:
                row = _row_from_record(json.loads(path.read_text()))
            except FileNotFoundError:
                continue  # moved by another process importing at the same time
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("not importing unreadable job record %s (moved to imported/): %s", path, exc)
            else:
                try:
                    with self.db.write() as conn:
                        conn.execute(sa.insert(jobs).values(**row))
                except sa.exc.IntegrityError:
                    pass  # imported already, by another process opening the directory at the same time
            try:
                os.replace(path, self.directory / "imported" / path.name)
            except FileNotFoundError:
                pass

    def _expire(self) -> None:
        """Remove the rows of jobs finished more than the time to live ago."""
        self._expired_at = time.monotonic()
        if not self.ttl_seconds:
            return
        cutoff = _stamp(datetime.now(UTC) - timedelta(seconds=self.ttl_seconds))
        with self.db.write() as conn:
            conn.execute(sa.delete(jobs).where(jobs.c.status.not_in(ACTIVE), jobs.c.finished < cutoff))

    # -- running -------------------------------------------------------------------------------------

    def submit(self, operation: str, request: dict[str, Any], work: Callable[[Callable[[int, int], None]], Any],
               start: Callable[[Callable[[], None]], Future], *, job_id: str | None = None) -> Job:
        """Record a job and start ``work(progress)`` through ``start`` (a worker pool's submit). ``job_id``: the id
        to record it under (a watch's, the same in every process), 409 ``job-exists`` where a job has it."""
        if time.monotonic() - self._expired_at >= min(self.ttl_seconds or EXPIRY_CHECK_S, EXPIRY_CHECK_S):
            self._expire()
        job = Job(job_id or uuid.uuid4().hex, operation, request)
        with self._lock:
            self._refuse_if_stopping()
            try:
                with self.db.write() as conn:
                    conn.execute(sa.insert(jobs).values(**job.row(), **self._owner, heartbeat=time.time()))
            except sa.exc.IntegrityError:
                if job_id is None:
                    raise
                raise ProblemError(409, "job-exists", "Job exists", f"job {job_id} was submitted already") from None
            self._start(job, work, start)
        return job

    def resumable(self, job_id: str) -> dict[str, Any]:
        """The request of an interrupted job, to plan it again (the fields it left out, recorded as null, left out
        again: the request models refuse a null); 404 or 409 (naming its state) otherwise."""
        job = self._get(job_id)
        if not job.interrupted:
            raise ProblemError(409, "job-not-interrupted", "Job cannot be resumed",
                               f"job {job_id} is {job.status}; only an interrupted job is resumed (submit it again)")
        return {**{k: v for k, v in job.request.items() if v is not None}, "operation": job.operation}

    def resume(self, job_id: str, work: Callable[[Callable[[int, int], None]], Any],
               start: Callable[[Callable[[], None]], Future]) -> Job:
        """Run an interrupted job again, under its id, owned by this store: once, however many stores are asked."""
        interrupted = self._get(job_id)
        self.resumable(job_id)
        job = Job(job_id, interrupted.operation, interrupted.request, created=interrupted.created)
        with self._lock:
            self._refuse_if_stopping()
            with self.db.write() as conn:
                taken = conn.execute(sa.update(jobs).where(
                    jobs.c.id == job_id, jobs.c.status == "failed", jobs.c.finished == interrupted.finished
                ).values(**job.row(), **self._owner, heartbeat=time.time())).rowcount
            if not taken:
                raise ProblemError(409, "job-not-interrupted", "Job cannot be resumed",
                                   f"job {job_id} was resumed or deleted meanwhile")
            self._start(job, work, start)
        return job

    def _refuse_if_stopping(self) -> None:
        if self._stopping:
            raise ProblemError(503, "shutting-down", "Shutting down", "the server is stopping; retry later")

    def _start(self, job: Job, work: Callable[[Callable[[int, int], None]], Any],
               start: Callable[[Callable[[], None]], Future]) -> None:
        """(The lock is held, the job's row written.)"""
        self._own[job.id] = job
        if self._beat is None:
            self._beat = threading.Thread(target=self._heartbeat, name="noa-job-heartbeat", daemon=True)
            self._beat.start()
        job.future = start(lambda: self._run(job, work))

    def _run(self, job: Job, work: Callable[[Callable[[int, int], None]], Any]) -> None:
        try:
            started = _now()
            if job.cancel.is_set() or not self._save(job, status="running", started=started, heartbeat=time.time()):
                job.status, job.finished = "cancelled", _now()
                return
            job.status, job.started = "running", started
            try:
                result = work(lambda done, total: self._progress(job, done, total))
            except Cancelled:
                if self._stopping:
                    self._end(job, "failed", error=_interrupted_error(job.id))
                else:
                    self._end(job, "cancelled")
            except Exception as exc:  # noqa: BLE001 - a job records every failure instead of raising it
                problem = classify(exc)
                where = f"/v1/jobs/{job.id}"
                error = (problem_body(problem.status, problem.detail, where, slug=problem.slug, title=problem.title)
                         if problem else internal_error(exc, where))
                self._end(job, "failed", error=error)
            else:
                self._end(job, "succeeded", result=result)
        finally:
            with self._lock:
                self._own.pop(job.id, None)

    def _end(self, job: Job, status: str, **values: Any) -> None:
        """Record how an owned job ended (unless its row was deleted: then it just ends), then say so in memory:
        a state a client sees is already in the database."""
        finished = _now()
        self._save(job, status=status, finished=finished, done=job.done, total=job.total, **values)
        job.result, job.error = values.get("result"), values.get("error")
        job.status, job.finished = status, finished

    def _progress(self, job: Job, done: int, total: int) -> None:
        """The ops progress callback: record progress, or stop here when the job was cancelled or deleted."""
        if job.cancel.is_set():
            raise Cancelled
        job.done, job.total = done, total
        if time.monotonic() - job.saved_at >= PROGRESS_SAVE_S:
            owned = self._save(job, done=done, total=total, heartbeat=time.time())
            job.saved_at = time.monotonic()
        else:
            owned = self._still_owned(job)
        if not owned:  # deleted (or declared interrupted) through another store
            job.cancel.set()
            raise Cancelled

    def _heartbeat(self) -> None:
        """Every HEARTBEAT_S while the store runs jobs: say they are alive, and cancel those whose rows are gone."""
        while not self._beat_stop.wait(HEARTBEAT_S):
            with self._lock:
                own = list(self._own.values())
            if not own:
                continue
            try:
                with self.db.write() as conn:
                    conn.execute(sa.update(jobs).where(jobs.c.owner_token == self._token, jobs.c.status.in_(ACTIVE))
                                 .values(heartbeat=time.time()))
                    kept = set(conn.execute(sa.select(jobs.c.id).where(
                        jobs.c.owner_token == self._token, jobs.c.status.in_(ACTIVE))).scalars())
            except sa.exc.SQLAlchemyError as exc:  # the database is away: try again at the next beat
                log.warning("job heartbeat failed: %s", exc)
                continue
            for job in own:
                if job.id not in kept and job.status in ACTIVE:
                    job.cancel.set()

    # -- answering -----------------------------------------------------------------------------------

    def _get(self, job_id: str) -> Job:
        row = self._settled(self._select(job_id))
        if row is None:
            raise ProblemError(404, "job-not-found", "Job not found", f"no job {job_id}")
        own = self._own.get(job_id)
        return own if own is not None else Job.from_row(row)  # this store's own is fresher (progress)

    def get(self, job_id: str) -> Job:
        """The job: from memory while this store runs it, else from its row."""
        return self._get(job_id)

    def snapshot(self, job_id: str) -> dict[str, Any]:
        """The job's public state: one the database holds (progress excepted, which is saved every
        PROGRESS_SAVE_S)."""
        return self._get(job_id).public()

    def page(self, state: str | None, since: str | None, limit: int,
             after: tuple[str, str] | None) -> tuple[list[dict[str, Any]], tuple[str, str] | None]:
        """Up to ``limit`` jobs, newest first (by creation, then id), in ``state`` and created at or after the
        stamp ``since`` (when given), that come after the (created, id) ``after``; and the (created, id) to
        continue from, None on the last page."""
        self._settle_active()
        query = sa.select(jobs).order_by(jobs.c.created.desc(), jobs.c.id.desc()).limit(limit + 1)
        if state is not None:
            query = query.where(jobs.c.status == state)
        if since is not None:
            query = query.where(jobs.c.created >= since)
        if after is not None:
            created, job_id = after
            query = query.where(sa.or_(jobs.c.created < created, sa.and_(jobs.c.created == created,
                                                                           jobs.c.id < job_id)))
        with self.db.read() as conn:
            rows: Sequence[sa.Row] = conn.execute(query).all()
        listed = [(self._own.get(row.id) or Job.from_row(row)).public() for row in rows[:limit]]
        last = rows[limit - 1] if len(rows) > limit else None
        return listed, None if last is None else (last.created, last.id)

    def cancel(self, job_id: str) -> dict[str, Any] | None:
        """Delete a job: an active one is also cancelled (it stops at its next block and its atomic
        output is never renamed into place). Returns the active job's last state, None for a finished one.
        """
        job = self._get(job_id)
        with self.db.write() as conn:
            row = conn.execute(sa.select(jobs.c.status).where(jobs.c.id == job_id).with_for_update()).first()
            if row is None:
                raise ProblemError(404, "job-not-found", "Job not found", f"no job {job_id}")
            conn.execute(sa.delete(jobs).where(jobs.c.id == job_id))
        if row.status not in ACTIVE:
            return None
        job.cancel.set()  # the owner sees it directly, or (another store) through the missing row
        if job.future is not None and job.future.cancel():  # still queued here: it never runs
            with self._lock:
                self._own.pop(job_id, None)
        return job.public()

    def stop(self) -> None:
        """At shutdown: stop running jobs between blocks and record every active job as interrupted."""
        with self._lock:
            self._stopping = True
            _OPEN_STORES.discard(self._token)
            own = list(self._own.values())
        for job in own:
            job.cancel.set()
            if job.future is not None and job.future.cancel():  # still queued: it never runs
                self._end(job, "failed", error=_interrupted_error(job.id))
                with self._lock:
                    self._own.pop(job.id, None)
        self._beat_stop.set()

    def busy(self) -> bool:
        """Whether this process runs (or has queued) a job."""
        with self._lock:
            return any(job.status in ACTIVE for job in self._own.values())

    def wait_idle(self, timeout: float) -> None:
        """Wait (bounded) for running jobs to notice the cancellation and record their state."""
        with self._lock:
            pending = [job.future for job in self._own.values() if job.future is not None]
        futures.wait(pending, timeout)


def _row_from_record(data: dict[str, Any]) -> dict[str, Any]:
    """The row of an earlier version's JSON record, whose owner ``boot:pid:start/token`` ran on this host
    (since its last boot, or it is gone: pid 0)."""
    process, _, token = str(data.get("owner", "")).partition("/")
    boot, pid, start = (process.split(":") + ["", "", ""])[:3]
    pid = pid if boot == _BOOT_ID else "0"
    job = Job(**{k: data[k] for k in ("id", "operation", "request", "status", "created", "started", "finished",
                                      "result", "error")},
              done=int(data["progress"]["done"]), total=int(data["progress"]["total"]))
    if job.status not in STATES or not isinstance(job.request, dict) or len(job.id) != 32:
        raise ValueError(f"not a job record: status {job.status!r}, id {job.id!r}")
    return {**job.row(), "owner_host": HOST_ID, "owner_pid": int(pid or 0), "owner_start": start,
            "owner_token": token, "heartbeat": 0.0}
