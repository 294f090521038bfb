"""The jobs' database: SQLite by default (one file in the state directory), PostgreSQL for several hosts.

SQLAlchemy Core, so that both speak the same statements. The schema carries its version
(``noa_schema``) and :func:`open_database` brings an older one up to date, one step per version,
in one transaction that other processes opening the database at the same moment wait for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 30.0  # how long an SQLite transaction waits for another process's write to end
# pg_advisory_xact_lock's key for migrations: any fixed number no other program on the database uses
_MIGRATION_LOCK = 0x6E6F615F6A6F6273  # "noa_jobs"

metadata = sa.MetaData()
schema = sa.Table("noa_schema", metadata, sa.Column("version", sa.Integer, nullable=False))
jobs = sa.Table(
    "noa_jobs", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("operation", sa.String(64), nullable=False),
    sa.Column("request", sa.JSON(none_as_null=True), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("done", sa.BigInteger, nullable=False),
    sa.Column("total", sa.BigInteger, nullable=False),
    # UTC as ISO 8601 with milliseconds and a Z, all of one width: text that sorts as time does, the same in
    # every database, and what the API shows.
    sa.Column("created", sa.String(32), nullable=False),
    sa.Column("started", sa.String(32)),
    sa.Column("finished", sa.String(32)),
    sa.Column("result", sa.JSON(none_as_null=True)),
    sa.Column("error", sa.JSON(none_as_null=True)),
    # The store that runs the job: its host (hostname/boot id), process (pid and start time) and token.
    sa.Column("owner_host", sa.String(300), nullable=False),
    sa.Column("owner_pid", sa.Integer, nullable=False),
    sa.Column("owner_start", sa.String(32), nullable=False),
    sa.Column("owner_token", sa.String(32), nullable=False),
    sa.Column("heartbeat", sa.Float, nullable=False),  # the owner's clock (Unix time) at its last sign of life
    sa.Index("noa_jobs_created", "created", "id"),
    sa.Index("noa_jobs_status_created", "status", "created", "id"),
    sa.Index("noa_jobs_finished", "finished"),
)


def _version_1(conn: sa.Connection) -> None:
    jobs.create(conn)


MIGRATIONS: dict[int, Callable[[sa.Connection], None]] = {1: _version_1}  # version -> the step that reaches it


def sqlite_url(directory: Path) -> str:
    return f"sqlite:///{directory / 'jobs.sqlite'}"


class Database:
    """An engine with two kinds of transaction: :meth:`read` and :meth:`write` (which, on SQLite, takes the
    write lock at BEGIN, so that a transaction that reads before it writes waits for others instead of failing)."""

    def __init__(self, url: str):
        try:
            parsed = sa.make_url(url)
        except sa.exc.ArgumentError:
            raise ValueError(f"database {url!r} is not a postgresql:// or sqlite:/// URL") from None
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")  # psycopg 3 (the postgres extra)
        if parsed.get_backend_name() not in ("postgresql", "sqlite"):
            raise ValueError(f"database {parsed.render_as_string()!r} is not a postgresql:// or sqlite:/// URL")
        self.shown = parsed.render_as_string(hide_password=True)
        self.sqlite = parsed.get_backend_name() == "sqlite"
        try:
            if self.sqlite:
                self.engine = sa.create_engine(parsed, connect_args={"timeout": BUSY_TIMEOUT_S})
                event.listen(self.engine, "connect", _sqlite_connect)
                event.listen(self.engine, "begin", _sqlite_begin)
            else:
                self.engine = sa.create_engine(parsed, pool_pre_ping=True)
            self._migrate()
        except (sa.exc.OperationalError, sa.exc.InterfaceError, ImportError) as exc:
            reason = " ".join(str(getattr(exc, "orig", None) or exc).split())
            raise ValueError(f"cannot open the jobs database {self.shown}: {reason}") from None

    @contextmanager
    def read(self) -> Iterator[sa.Connection]:
        with self.engine.connect() as conn, conn.begin():
            yield conn

    @contextmanager
    def write(self) -> Iterator[sa.Connection]:
        with self.engine.connect() as conn:
            conn.execution_options(noa_write=True)
            with conn.begin():
                yield conn

    def _migrate(self) -> None:
        with self.write() as conn:
            if not self.sqlite:  # PostgreSQL's DDL does not wait for a concurrent CREATE: this does
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_MIGRATION_LOCK)))
            schema.create(conn, checkfirst=True)
            version = conn.execute(sa.select(schema.c.version)).scalar()
            if version is None:
                version = 0
                conn.execute(schema.insert().values(version=0))
            if version > SCHEMA_VERSION:
                raise ValueError(f"the jobs database {self.shown} has schema version {version}, newer than this "
                                 f"noa's ({SCHEMA_VERSION}): upgrade noa")
            for step in range(version + 1, SCHEMA_VERSION + 1):
                MIGRATIONS[step](conn)
            conn.execute(schema.update().values(version=SCHEMA_VERSION))

    def close(self) -> None:
        self.engine.dispose()


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # SQLAlchemy, not the sqlite3 module, says where transactions begin (see _sqlite_begin).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # readers do not wait for the writer, nor it for them
    cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    cursor.close()


def _sqlite_begin(conn: sa.Connection) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("noa_write") else "BEGIN")
