"""The watches' tables, in the jobs' database (:mod:`noa_server.job_db`): what each watch is, who scans it, and
which files it took.

- ``noa_watches``: a watch (its request as JSON) and its lease: the scanner that holds it (a token of one
  service process) and that scanner's heartbeat (Unix time). Only the holder scans the watch; another
  process takes it over once the heartbeat is older than the lease, or at once when the holder gave it back.
- ``noa_watch_files``: each file a watch took, once: UNIQUE (watch, path), inserted in a transaction that
  also checks the lease, so neither two scanners nor a restart take a file twice. The job made of it is
  linked once submitted.

The tables are created beside the jobs' (``CREATE TABLE IF NOT EXISTS``, serialised between processes that
open the database at once); they change no table of the jobs' schema.
"""

from __future__ import annotations

import sqlalchemy as sa

from noa_server.job_db import Database

_CREATE_LOCK = 0x6E6F615F77617463  # "noa_watc": pg_advisory_xact_lock's key while the tables are created

metadata = sa.MetaData()
watches = sa.Table(
    "noa_watches", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.String(100), nullable=False, unique=True),
    sa.Column("spec", sa.JSON(none_as_null=True), nullable=False),  # the watch as the client gave it (validated)
    sa.Column("created", sa.String(32), nullable=False),
    sa.Column("holder", sa.String(32)),  # the scanner's token; NULL: no process scans it
    sa.Column("heartbeat", sa.Float, nullable=False, default=0.0),
)
taken = sa.Table(
    "noa_watch_files", metadata,
    sa.Column("watch_id", sa.String(32), nullable=False),
    sa.Column("path", sa.String(1024), nullable=False),  # relative to the data root
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("mtime_ns", sa.BigInteger, nullable=False),
    sa.Column("taken", sa.String(32), nullable=False),  # when (a jobs stamp: UTC, milliseconds)
    sa.Column("job_id", sa.String(32)),  # NULL until the job is submitted
    sa.Column("error", sa.Text),  # why no job could be made of the file (it was refused)
    sa.UniqueConstraint("watch_id", "path", name="noa_watch_files_once"),
    sa.Index("noa_watch_files_job", "job_id"),
)


def create_tables(db: Database) -> None:
    with db.write() as conn:
        if not db.sqlite:  # PostgreSQL's CREATE TABLE IF NOT EXISTS races with a concurrent one: this waits
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_CREATE_LOCK)))
        metadata.create_all(conn, checkfirst=True)
