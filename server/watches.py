"""Watched folders: jobs that start themselves when files land in a folder under the data root.

A watch names a folder, a pattern of file names (``*.eer``; the folder itself, not its subfolders), a job
(the body of ``POST /v1/jobs`` without its paths) and, for operations that write, an output folder: each file
that matches becomes one job, ``OUTPUT/<stem><ext>`` (without ``ext``: ``OUTPUT/<name>``), once it has
stopped growing (its size and modification time unchanged for ``settle_seconds``).

Exactly once, across restarts and service processes and hosts that share the database
(:mod:`noa_server.watch_db`):

- One process scans a watch at a time: the holder of its lease, which it renews every ``RENEW_S``; another
  takes the watch over once the lease is ``LEASE_S`` old, or at once when the holder stopped and gave it back.
- A file is taken by inserting its row (UNIQUE per watch and path) in a transaction that also checks the lease;
  its job is then submitted and linked to the row. A process that died between the two leaves a row without a
  job: the next holder links the job that process submitted, or submits it.
- Jobs of a watch whose process died (interrupted) are resumed by the watch's holder.

Changes are noticed by inotify (``watchfiles``) or, with ``poll`` (network filesystems, where inotify does not
see other hosts' writes), by listing the folder every ``poll_seconds``. Scanners are threads; the event loop
never waits for them.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import os
import threading
import time
import tomllib
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Annotated, Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from noa_core import operations
from noa_core.io import formats
from noa_core.operations import Operation
from noa_server.job_db import jobs
from noa_server.jobs import ACTIVE, STATES, JobStore, since_stamp
from noa_server.models import RelPath, job_model, job_request
from noa_server.problems import ProblemError
from noa_server.sandbox import AnySandbox, RemoteSandbox, Sandbox
from noa_server.watch_db import create_tables, taken, watches

try:
    import watchfiles
except ImportError:  # not installed (the serve extra brings it): folders are polled
    watchfiles = None  # type: ignore[assignment]  # a module, or None where there is none

log = logging.getLogger("noa.server")
LEASE_S = 15.0  # a holder silent this long has lost its watches
ON_OBJECT_STORAGE = ("the data root is on object storage, where nothing tells of a new object (no inotify) and "
                     "listing a prefix again and again costs a request each time; watched folders need a data root "
                     "of this machine's folders")
RENEW_S = 2.0  # how often a process renews its leases and looks for watches no one scans
SWEEP_S = 5.0  # how often a holder looks for its watch's interrupted jobs
STOP_WAIT_S = 10.0
PATHS = ("src", "srcs", "path", "dst")  # the job fields a watch fills in itself
Start = Callable[[Callable[[], None]], Future]
Work = Callable[[Callable[[int, int], None]], Any]
Plan = Callable[[Any], Work]  # a job request -> its work, paths checked (the service's job_work)


def _now() -> str:
    return since_stamp(datetime.now(UTC))


class WatchSpec(BaseModel):
    """The body of ``POST /v1/watches`` (and one watch of ``noa serve --watch CONFIG``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
                               description="Unique among watches (a config file's watches are matched by it).")]
    folder: RelPath = Field(description="The watched folder, relative to the data root (its subfolders are not).")
    pattern: Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[^/]+$",
                                  description="Which file names are taken: a glob (`*.eer`, `FoilHole_*.tiff`), "
                                              "case-sensitive. Names starting with a dot never are.")]
    job: dict[str, Any] = Field(description="What each file becomes: the body of POST /v1/jobs without its paths "
                                            "(`src`, `srcs`, `path`, `dst`), e.g. "
                                            '`{"operation": "copy", "dtype": "float16"}`.')
    output: RelPath | None = Field(None, description="The folder outputs go in, relative to the data root (made when "
                                                     "missing; not the watched folder). Required by operations that "
                                                     "write.")
    ext: Annotated[str, Field(pattern=r"^\.[A-Za-z0-9][A-Za-z0-9.]{0,19}$")] | None = Field(
        None, description="The outputs' extension, which picks their format (default: the input's name is kept).")
    settle_seconds: Annotated[float, Field(ge=0, le=3600)] = Field(
        2.0, description="A file is taken once its size and modification time have not changed for this long.")
    poll: bool = Field(False, description="List the folder every poll_seconds instead of waiting for inotify "
                                          "(network filesystems, where inotify misses other hosts' writes).")
    poll_seconds: Annotated[float, Field(ge=0.05, le=3600)] = Field(5.0, description="How often a polled folder "
                                                                                     "is listed.")


class InvalidWatch(Exception):
    """A watch refused by validation: pydantic's errors, their ``loc`` within the watch."""

    def __init__(self, errors: list[dict[str, Any]]):
        super().__init__("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors))
        self.errors = errors


def _invalid(field: str, message: str) -> InvalidWatch:
    return InvalidWatch([{"loc": tuple(field.split(".")), "msg": message, "type": "value_error"}])


class Rules:
    """How a watch's request is checked and how a file becomes a job request: the operations' job models,
    the sandbox."""

    def __init__(self, declared: list[Operation], sandbox: AnySandbox):
        self.requests: TypeAdapter[Any] = TypeAdapter(job_request(declared))
        self.by_name = {op.name: op for op in declared}
        self.sandbox = sandbox

    def spec(self, body: Any) -> WatchSpec:
        """The watch ``body`` checked: InvalidWatch naming the field, ProblemError for paths outside the root (403)
        or a watched folder that is not there (404)."""
        if isinstance(self.sandbox, RemoteSandbox):
            raise ProblemError(409, "watches-unavailable", "Watched folders unavailable", ON_OBJECT_STORAGE)
        try:
            spec = WatchSpec.model_validate(body)
        except ValidationError as exc:
            raise InvalidWatch([dict(e) for e in exc.errors()]) from None
        spec.folder = PurePosixPath(spec.folder).as_posix()
        if spec.output is not None:
            spec.output = PurePosixPath(spec.output).as_posix()
        for name in PATHS:
            if name in spec.job:
                raise _invalid(f"job.{name}", "the watch gives the paths; leave them out of the job")
        operation = self.operation(spec.job)
        if operation is not None and operation.writes is not None and spec.output is None:
            raise _invalid("output", f"{operation.name} writes files: give the folder they go in")
        if operation is not None and operation.writes is None and spec.output is not None:
            raise _invalid("output", f"{operation.name} writes nothing (its result is the job's)")
        if spec.output is not None and spec.output == spec.folder:
            raise _invalid("output", "outputs cannot go in the watched folder")
        self.request(spec, f"{spec.folder}/{spec.pattern}")  # the job's values checked, on a file the pattern names
        for field in ("folder", "output"):
            value = getattr(spec, field)
            if value is not None:
                try:
                    self.sandbox.resolve(value)
                except ProblemError as problem:
                    problem.detail = f"{field}: {problem.detail}"
                    raise
        if not self.sandbox.resolve(spec.folder).is_dir():
            raise ProblemError(404, "file-not-found", "File or folder not found",
                               f"folder: {spec.folder}: no such folder")
        return spec

    def operation(self, job: dict[str, Any]) -> Operation | None:
        """The operation a job names (None: none known; validating the job says why)."""
        name = job.get("operation")
        return self.by_name.get(name) if isinstance(name, str) else None

    def request(self, spec: WatchSpec, path: str) -> Any:
        """The job request (a validated model) that the file ``path`` (relative to the root) becomes."""
        body = dict(spec.job)
        operation = self.operation(body)
        if operation is not None:
            model_fields = job_model(operation).model_fields
            body["srcs" if "srcs" in model_fields else "src" if "src" in model_fields else "path"] = (
                [path] if "srcs" in model_fields else path)
            if "dst" in model_fields and spec.output is not None:
                body["dst"] = f"{spec.output}/{output_name(path, spec.ext, operation)}"
        try:
            return self.requests.validate_python(body)
        except ValidationError as exc:
            tag = body.get("operation")
            raise InvalidWatch([{**e, "loc": ("job", *(e["loc"][1:] if e["loc"][:1] == (tag,) else e["loc"]
                                                        or ("operation",)))} for e in exc.errors()]) from None


def output_name(path: str, ext: str | None, operation: Operation) -> str:
    """The output of the file ``path``, as ``noa NAME ... --out-dir`` names it: its stem plus ``ext``, else its
    name; a folder of outputs is named by the stem alone."""
    name = PurePosixPath(path).name
    stem = formats.strip_image_suffix(name)
    return stem if operation.writes == "folder" else name if ext is None else stem + ext


def load_config(path: Path, rules: Rules) -> list[WatchSpec]:
    """The watches of a JSON or TOML file (``{"watches": [...]}``, or a JSON list; TOML: ``[[watches]]``),
    each checked; ValueError naming the file, the watch and the field."""
    try:
        text = path.read_text()
        data: Any = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except OSError as exc:
        raise ValueError(f"watch config {path}: {exc.strerror or exc}") from None
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"watch config {path}: not {'TOML' if path.suffix.lower() == '.toml' else 'JSON'}: {exc}") \
            from None
    listed = data.get("watches") if isinstance(data, dict) else data
    if not isinstance(listed, list):
        raise ValueError(f"watch config {path}: expected a list of watches (the key 'watches')")
    specs, names = [], set()
    for i, body in enumerate(listed):
        where = f"watch config {path}: watch {i + 1}" + (f" ({body['name']})" if isinstance(body, dict)
                                                      and isinstance(body.get("name"), str) else "")
        try:
            spec = rules.spec(body)
        except InvalidWatch as exc:
            raise ValueError(f"{where}: {exc}") from None
        except ProblemError as exc:
            raise ValueError(f"{where}: {exc.detail}") from None
        if spec.name in names:
            raise ValueError(f"{where}: name: another watch of the file has this name")
        names.add(spec.name)
        specs.append(spec)
    return specs


def open_watches(config: Path | None, store: JobStore | None, sandbox: AnySandbox | None, start: Start,
                 plan: Plan) -> Watches | None:
    """The watches of a service with a data root (None without), and those of the ``config`` file (checked now).
    A data root on object storage has none (:data:`ON_OBJECT_STORAGE`): a config file stops the service, a watch
    asked for is refused (409)."""
    if store is None or sandbox is None:
        if config is not None:
            raise ValueError(f"watch config {config}: watched folders are under the data root; give one")
        return None
    if isinstance(sandbox, RemoteSandbox):
        if config is not None:
            raise ValueError(f"watch config {config}: {ON_OBJECT_STORAGE}")
        return Watches(store, Rules(operations.operations(), sandbox), start, plan)
    rules = Rules(operations.operations(), sandbox)
    return Watches(store, rules, start, plan, () if config is None else load_config(config, rules))


class Watches:
    """The watches of one service process: their rows, and the scanners of those whose lease it holds."""

    def __init__(self, store: JobStore, rules: Rules, start: Start, plan: Plan, config: Iterable[WatchSpec] = (),
                 *, lease_seconds: float = LEASE_S):
        self.store, self.db, self.rules, self.start_job, self.plan = store, store.db, rules, start, plan
        self.config = list(config)
        self.lease_seconds = lease_seconds
        self.token = uuid.uuid4().hex
        self._scanners: dict[str, Scanner] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        create_tables(self.db)

    # -- the lease ---------------------------------------------------------------------------------------

    def start(self) -> None:
        """Create the config's watches that are not there (by name), then scan those no one scans."""
        for spec in self.config:
            try:
                self._insert(spec)
            except ProblemError:  # there already (made by an earlier start, or another process now)
                pass
        self._thread = threading.Thread(target=self._keep_leases, name="noa-watch-leases", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop scanning (each scanner ends after the file it is taking) and give the leases back."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(STOP_WAIT_S)
        scanners = list(self._scanners.values())
        for scanner in scanners:
            scanner.halt.set()
        for scanner in scanners:
            scanner.join(STOP_WAIT_S)
        try:
            with self.db.write() as conn:
                conn.execute(sa.update(watches).where(watches.c.holder == self.token).values(holder=None))
        except sa.exc.SQLAlchemyError as exc:
            log.warning("could not give the watches' leases back (others take them over in %.0f s): %s",
                        self.lease_seconds, exc)

    def _keep_leases(self) -> None:
        while not self._stop.is_set():
            try:
                self._renew_and_take()
            except sa.exc.SQLAlchemyError as exc:  # the database is away: try again
                log.warning("watch leases: %s", exc)
            except Exception:  # noqa: BLE001 - logged; the leases are tried again
                log.exception("watch leases")
            self._wake.wait(RENEW_S)
            self._wake.clear()

    def _renew_and_take(self) -> None:
        if not self._scanners:  # nothing held: a write (SQLite's lock) only when there is a watch to take
            with self.db.read() as conn:
                if conn.execute(sa.select(watches.c.id).limit(1)).first() is None:
                    return
        now = time.time()
        with self.db.write() as conn:
            conn.execute(sa.update(watches).where(watches.c.holder == self.token).values(heartbeat=now))
            rows = conn.execute(sa.select(watches.c.id, watches.c.spec, watches.c.holder, watches.c.heartbeat)).all()
            held = {row.id for row in rows if row.holder == self.token or (
                (row.holder is None or row.heartbeat < now - self.lease_seconds) and self._claim(conn, row, now))}
        specs = {row.id: row.spec for row in rows}
        for watch_id, scanner in list(self._scanners.items()):
            if watch_id not in held or not scanner.is_alive():  # lost (deleted, taken over), or failed: restarted
                scanner.halt.set()
                del self._scanners[watch_id]
        for watch_id in held:
            if watch_id not in self._scanners and not self._stop.is_set():
                scanner = Scanner(self, watch_id, WatchSpec.model_validate(specs[watch_id]))
                self._scanners[watch_id] = scanner
                scanner.start()

    def _claim(self, conn: sa.Connection, row: sa.Row, now: float) -> bool:
        """Take the lease of a watch no one scans: only if its holder and heartbeat are still what was read."""
        holder = watches.c.holder.is_(None) if row.holder is None else watches.c.holder == row.holder
        if not conn.execute(sa.update(watches).where(watches.c.id == row.id, holder,
                                                     watches.c.heartbeat == row.heartbeat)
                            .values(holder=self.token, heartbeat=now)).rowcount:
            return False
        if row.holder is not None:
            log.warning("watch %s: taken over from a process silent for %.0f s", row.id, now - row.heartbeat)
        return True

    def holds(self, conn: sa.Connection, watch_id: str) -> bool:
        """(In a write transaction.) Whether this process still holds the watch's lease: renewed now."""
        return conn.execute(sa.update(watches).where(watches.c.id == watch_id, watches.c.holder == self.token)
                            .values(heartbeat=time.time())).rowcount == 1

    # -- the doors -----------------------------------------------------------------------------------------

    def create(self, body: Any) -> dict[str, Any]:
        """Check and record a watch; scanning starts within moments (in this process or another)."""
        row = self._insert(self.rules.spec(body))
        self._wake.set()
        return self._public(row, counts=True)

    def _insert(self, spec: WatchSpec) -> sa.Row:
        if spec.output is not None:
            _make_folder(self.rules.sandbox, spec.output)
        watch_id = uuid.uuid4().hex
        values = {"id": watch_id, "name": spec.name, "spec": spec.model_dump(mode="json"),
                  "created": _now(), "holder": None, "heartbeat": 0.0}
        try:
            with self.db.write() as conn:
                conn.execute(sa.insert(watches).values(**values))
        except sa.exc.IntegrityError:
            raise ProblemError(409, "watch-exists", "Watch exists",
                               f"name: a watch named {spec.name!r} exists; delete it first") from None
        return self._row(watch_id)

    def _row(self, watch_id: str) -> sa.Row:
        with self.db.read() as conn:
            row = conn.execute(sa.select(watches).where(watches.c.id == watch_id)).first()
        if row is None:
            raise ProblemError(404, "watch-not-found", "Watch not found", f"no watch {watch_id}")
        return row

    def _public(self, row: sa.Row, counts: bool = False) -> dict[str, Any]:
        shown = {"id": row.id, **row.spec, "created": row.created,
                 "scanning": row.holder is not None and time.time() - row.heartbeat < self.lease_seconds}
        if counts:
            with self.db.read() as conn:
                files, refused = conn.execute(sa.select(sa.func.count(), sa.func.count(taken.c.error))
                                              .where(taken.c.watch_id == row.id)).one()
                states = conn.execute(sa.select(jobs.c.status, sa.func.count())
                                      .join(taken, taken.c.job_id == jobs.c.id)
                                      .where(taken.c.watch_id == row.id).group_by(jobs.c.status)).all()
            shown |= {"files": files, "refused": refused, "jobs": {state: 0 for state in STATES} | dict(states)}
        return shown

    def get(self, watch_id: str) -> dict[str, Any]:
        return self._public(self._row(watch_id), counts=True)

    def listing(self) -> list[dict[str, Any]]:
        with self.db.read() as conn:
            rows = conn.execute(sa.select(watches).order_by(watches.c.created, watches.c.id)).all()
        return [self._public(row) for row in rows]

    def delete(self, watch_id: str) -> None:
        """Stop the watch (its scanner, wherever it runs, takes no file after this); its jobs stay."""
        with self.db.write() as conn:
            if not conn.execute(sa.delete(watches).where(watches.c.id == watch_id)).rowcount:
                raise ProblemError(404, "watch-not-found", "Watch not found", f"no watch {watch_id}")
            conn.execute(sa.delete(taken).where(taken.c.watch_id == watch_id))
        self._wake.set()

    # -- jobs ----------------------------------------------------------------------------------------------

    def submit(self, spec: WatchSpec, path: str, job_id: str) -> None:
        """Submit the job of the file ``path`` under ``job_id`` (ProblemError when the file is refused, 409
        ``job-exists`` when another process submitted it)."""
        try:
            request = self.rules.request(spec, path)
        except InvalidWatch as exc:  # a name the request refuses (too long)
            raise ProblemError(400, "invalid-parameters", "Invalid parameters", str(exc)) from None
        work = self.plan(request)
        self.store.submit(request.operation, request.model_dump(mode="json"), work, self.start_job, job_id=job_id)

    def resume(self, job_id: str) -> None:
        """Run an interrupted job of a watch again (once, however many processes try)."""
        try:
            request = self.rules.requests.validate_python(self.store.resumable(job_id))
            self.store.resume(job_id, self.plan(request), self.start_job)
            log.info("job %s of a watch was interrupted: resumed", job_id)
        except (ProblemError, ValidationError) as exc:  # resumed meanwhile, deleted, or no longer plannable
            log.warning("job %s of a watch not resumed: %s", job_id, getattr(exc, "detail", exc))


def _make_folder(sandbox: AnySandbox, relative: str) -> None:
    """The folder ``relative`` made when missing, beneath the root (its parent must exist)."""
    assert isinstance(sandbox, Sandbox)  # Rules.spec refuses every watch on object storage
    sandbox.make_folder(relative)
    if not sandbox.resolve(relative).is_dir():
        raise _invalid("output", f"{relative} is a file, not a folder")


class Scanner(threading.Thread):
    """Takes the files of one watch whose lease this process holds, until ``halt`` is set."""

    def __init__(self, owner: Watches, watch_id: str, spec: WatchSpec):
        super().__init__(name=f"noa-watch-{spec.name}", daemon=True)
        self.owner, self.watch_id, self.spec = owner, watch_id, spec
        self.halt = threading.Event()
        self._taken: set[str] = set()  # paths of files taken (by any process)
        self._pending: dict[str, tuple[int, int, float]] = {}  # path -> size, mtime_ns, when first seen so
        self._active: set[str] = set()  # ids of the watch's jobs seen queued or running
        self._swept = 0.0

    def run(self) -> None:
        try:
            with self.owner.db.read() as conn:
                rows = conn.execute(sa.select(taken.c.path, taken.c.job_id, taken.c.error, taken.c.taken)
                                    .where(taken.c.watch_id == self.watch_id)).all()
            self._taken = {row.path for row in rows}
            self._recover([row for row in rows if row.job_id is None and row.error is None])
            self._sweep(everything=True)
            if self.spec.poll or watchfiles is None:
                self._poll()
            else:
                self._notified()
        except Exception:  # noqa: BLE001 - a scanner's failure is logged; the lease thread starts another
            log.exception("watch %s stopped", self.spec.name)

    def _poll(self) -> None:
        due = 0.0
        while not self.halt.is_set():
            now = time.monotonic()
            if now >= due:
                self._scan(full=True)
                due = now + self.spec.poll_seconds
            else:
                self._scan(full=False)
            self.halt.wait(max(0.0, min(due, self._next_settled()) - time.monotonic()))

    def _notified(self) -> None:
        """Scan when inotify reports changes (and re-look at growing files every so often)."""
        folder = self.owner.rules.sandbox.resolve(self.spec.folder)
        self._scan(full=True)
        recheck_ms = int(min(0.5, max(0.05, self.spec.settle_seconds / 10)) * 1000)  # growing files re-looked at
        armed = False  # inotify reports only what changes once it watches: the folder is listed again then
        try:
            for changes in watchfiles.watch(folder, watch_filter=None, debounce=100, step=20, rust_timeout=recheck_ms,
                                            yield_on_timeout=True, stop_event=self.halt, recursive=False,
                                            force_polling=False, raise_interrupt=False):
                self._scan(full=bool(changes) or not armed)
                armed = True
        except (OSError, RuntimeError) as exc:  # no inotify here (or no watches left): list the folder instead
            log.warning("watch %s: inotify unavailable (%s); polling every %g s", self.spec.name, exc,
                        self.spec.poll_seconds)
            self._poll()

    def _next_settled(self) -> float:
        """When the next growing file will have stood still for settle_seconds (monotonic)."""
        return min((since + self.spec.settle_seconds for _, _, since in self._pending.values()), default=float("inf"))

    def _scan(self, full: bool) -> None:
        """Look at the folder (``full``) or at the files seen growing; take those that stopped."""
        now = time.monotonic()
        if now - self._swept >= SWEEP_S:
            self._sweep()
        try:
            folder = self.owner.rules.sandbox.resolve(self.spec.folder)
            if full:
                with os.scandir(folder) as entries:
                    seen = [(entry.name, entry.stat(follow_symlinks=False)) for entry in entries
                            if not entry.name.startswith(".") and fnmatch.fnmatchcase(entry.name, self.spec.pattern)
                            and f"{self.spec.folder}/{entry.name}" not in self._taken
                            and entry.is_file(follow_symlinks=False)]
            else:
                seen = list(_stats(folder, [PurePosixPath(p).name for p in self._pending]))
        except (OSError, ProblemError) as exc:  # the folder went (or became a link out of the root)
            log.warning("watch %s: cannot list %s: %s", self.spec.name, self.spec.folder,
                        getattr(exc, "detail", exc))
            return
        present = set()
        for name, st in seen:
            path = f"{self.spec.folder}/{name}"
            present.add(path)
            known = self._pending.get(path)
            if known is None or known[:2] != (st.st_size, st.st_mtime_ns):
                self._pending[path] = (st.st_size, st.st_mtime_ns, now)
        for path in [p for p in self._pending if p not in present]:
            del self._pending[path]  # gone (renamed away, deleted)
        settled = sorted(p for p, (_, _, since) in self._pending.items()
                         if now - since >= self.spec.settle_seconds)
        for path in settled:
            if self.halt.is_set():
                return
            size, mtime_ns, _ = self._pending.pop(path)
            self._take(path, size, mtime_ns)

    def _take(self, path: str, size: int, mtime_ns: int) -> None:
        """Take the file: its row (if the lease is still this process's and no one took it), then its job."""
        owner = self.owner
        stamp = _now()
        try:
            with owner.db.write() as conn:
                if not owner.holds(conn, self.watch_id):
                    self.halt.set()  # the watch was deleted, or taken over
                    return
                conn.execute(sa.insert(taken).values(watch_id=self.watch_id, path=path, size=size, mtime_ns=mtime_ns,
                                                     taken=stamp))
        except sa.exc.IntegrityError:  # taken already (the UNIQUE constraint: the last guard)
            self._taken.add(path)
            return
        self._taken.add(path)
        self._submit(path, stamp)

    def _submit(self, path: str, stamp: str) -> None:
        """Submit the job of a file taken at ``stamp``, under the id its take gives it (:func:`job_id_of`): a process
        that finds the file without its job after this one took it (the next holder of the lease) submits the same
        id, and only the first insert of it makes a job."""
        owner = self.owner
        job_id = job_id_of(self.watch_id, path, stamp)
        values: dict[str, Any] = {"job_id": job_id}
        try:
            owner.submit(self.spec, path, job_id)
        except ProblemError as problem:
            if problem.status == 503:  # this process is stopping: the next holder submits it
                self.halt.set()
                return
            if problem.slug != "job-exists":  # (submitted by another process: linked here all the same)
                log.warning("watch %s: %s refused: %s", self.spec.name, path, problem.detail)
                values = {"error": problem.detail}
        if "job_id" in values:
            self._active.add(job_id)
        with owner.db.write() as conn:
            conn.execute(sa.update(taken).where(taken.c.watch_id == self.watch_id, taken.c.path == path)
                         .values(**values))

    def _recover(self, orphans: Iterable[sa.Row]) -> None:
        """Files taken by a process that died (or lost the lease) before it linked their jobs: submit each under
        its id, which links the job that process submitted where there is one."""
        for row in orphans:
            self._submit(row.path, row.taken)

    def _sweep(self, everything: bool = False) -> None:
        """Resume the watch's interrupted jobs: those active at the last sweep or now (``everything``: and every
        failed one, when the scanner starts)."""
        self._swept = time.monotonic()
        states = (*ACTIVE, "failed") if everything else ACTIVE
        with self.owner.db.read() as conn:
            ids = set(conn.execute(sa.select(jobs.c.id).join(taken, taken.c.job_id == jobs.c.id).where(
                taken.c.watch_id == self.watch_id, jobs.c.status.in_(states))).scalars())
        still = set()
        for job_id in ids | self._active:
            try:
                job = self.owner.store.get(job_id)  # an active job whose owner is gone is recorded as interrupted
            except ProblemError:  # deleted
                continue
            if job.interrupted:
                self.owner.resume(job_id)
                still.add(job_id)
            elif job.status in ACTIVE:
                still.add(job_id)
        self._active = still


def job_id_of(watch_id: str, path: str, stamp: str) -> str:
    """The id of the job of the file ``path`` that the watch took at ``stamp``: the same in every process."""
    return hashlib.sha256(f"{watch_id}\0{path}\0{stamp}".encode()).hexdigest()[:32]


def _stats(folder: Path, names: Iterable[str]) -> Iterable[tuple[str, os.stat_result]]:
    for name in names:
        try:
            yield name, os.lstat(folder / name)
        except FileNotFoundError:
            continue
