"""The service's configuration: one frozen dataclass, built from environment variables and CLI options.

``noa serve`` passes its options as overrides; a container (or ``uvicorn --factory``) gets the same
settings from ``NOA_*`` environment variables alone, so both start the identical app.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noa_core.io.remote import RemotePath, as_path
from noa_core.limits import available_cores

ENV_PREFIX = "NOA_"


@dataclass(frozen=True)
class Settings:
    """Everything the app factory needs.

    ``data_root`` None disables server-side paths and jobs (uploads still work); a URL of object storage
    (``s3://bucket/prefix``, given as a string or a RemotePath) is kept as a RemotePath, and then needs ``state_dir``.
    ``state_dir`` None means ``<data_root>/.noa-jobs``. ``tmp_dir`` None means the system's.
    ``database``: where jobs are kept, an SQLAlchemy URL (``postgresql://user@host:port/db`` for several
    hosts); None means SQLite, ``<state_dir>/jobs.sqlite``.
    ``scheduler``: run jobs on a Dask cluster: ``local`` or ``local:N`` (a cluster of N worker processes on this
    host, started by each server process), or a running scheduler's address, ``tcp://host:8786``; None: in the
    worker pool.
    ``job_ttl`` is how many seconds a finished job's record is kept (0: forever); the files a job
    wrote are the client's and are never removed.
    ``max_expressions``: a process that has compiled this many distinct client expressions is
    replaced by a fresh one once idle (numba never gives compiled code back; each costs ~5 MB; 0: never).
    ``watch_config``: a JSON or TOML file of watched folders, created at start-up unless there (by name).
    ``warmup``: compile the kernels into the shared cache at start, once per installation (a process
    that finds them cached, or another process compiling them, does nothing).
    ``processes`` server processes (uvicorn workers) each run ``workers`` operations at once. Several
    processes, not more threads, because request handling is Python code that one process runs on
    one core at a time (the GIL); jobs are shared through the database.
    """

    data_root: Path | None = None
    state_dir: Path | None = None
    database: str | None = None
    scheduler: str | None = None
    api_key: str | None = None
    max_body_bytes: int = 1 << 30
    max_voxels: int = 1 << 31
    workers: int = 2
    processes: int = dataclasses.field(default_factory=lambda: min(2, available_cores()))
    cors_origins: tuple[str, ...] = ()
    tmp_dir: Path | None = None
    job_ttl: int = 7 * 24 * 3600
    max_expressions: int = 200
    warmup: bool = True
    watch_config: Path | None = None

    def __post_init__(self) -> None:
        if self.workers < 1 or self.processes < 1:
            raise ValueError(f"workers and processes must be at least 1, got {self.workers} and {self.processes}")
        if self.max_body_bytes < 1 or self.max_voxels < 1:
            raise ValueError("max_body_bytes and max_voxels must be positive")
        if self.max_expressions < 0:
            raise ValueError(f"max_expressions must be 0 (never replace) or a count, got {self.max_expressions}")
        if self.job_ttl < 0:
            raise ValueError(f"job_ttl must be 0 (keep forever) or a number of seconds, got {self.job_ttl}")
        if self.scheduler and not re.fullmatch(r"local(:[1-9][0-9]*)?|[a-z]+://\S+", self.scheduler):
            raise ValueError(f"scheduler {self.scheduler!r} is not local, local:N (worker processes) or a Dask "
                             "scheduler's address such as tcp://host:8786")
        self._check_remote_root()
        # Resolve once so that every later containment check compares canonical paths.
        for name in ("data_root", "state_dir", "tmp_dir", "watch_config"):
            if isinstance(getattr(self, name), RemotePath):
                continue
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Path(value).expanduser().resolve())
        for name in ("api_key", "database", "scheduler"):
            if getattr(self, name) == "":
                object.__setattr__(self, name, None)

    def _check_remote_root(self) -> None:
        """A data root on object storage (``s3://bucket/prefix``) kept as its URL (without a trailing ``/``); the
        job state then needs a folder of this machine, named (jobs' records and locks need a file system)."""
        if self.data_root is None:
            return
        root = as_path(self.data_root)  # a URL given as a string (NOA_DATA_ROOT, --data-root) becomes a RemotePath
        if isinstance(root, RemotePath):
            key = root.url.split("://", 1)[1].rstrip("/")
            if root.scheme not in ("s3", "gs") or any(c in root.url for c in "?#") or "" in key.split("/"):
                raise ValueError(f"data root {root}: a data root on remote storage is a bucket or a prefix of one, "
                                 "s3://bucket/prefix or gs://bucket/prefix (no empty segment, '?' or '#')")
            root = RemotePath(root.url.rstrip("/"))
            if self.state_dir is None:
                raise ValueError(f"data root {root} is on object storage: give a folder of this machine for the job "
                                 "state (--state-dir, or NOA_STATE_DIR)")
        object.__setattr__(self, "data_root", root)

    @property
    def jobs_dir(self) -> Path | None:
        if self.state_dir is not None:
            return self.state_dir
        return None if self.data_root is None else self.data_root / ".noa-jobs"

    @property
    def dask(self) -> tuple[str, int | None] | None:
        """``scheduler`` as (``local`` or the address, the local cluster's worker processes), None without one."""
        if self.scheduler is None:
            return None
        address, _, workers = self.scheduler.partition(":") if self.scheduler.startswith("local") else (
            self.scheduler, "", "")
        return address, int(workers) if workers else None

    @property
    def kernel_threads(self) -> int:
        """Numba threads per worker, so that processes x workers x kernel threads fit the cores."""
        return max(1, available_cores() // (self.processes * self.workers))

    def to_env(self) -> dict[str, str]:
        """The ``NOA_*`` variables that :meth:`from_env` turns back into these settings (how server
        processes started by uvicorn get them)."""
        env = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "cors_origins":
                value = ",".join(value)
            if isinstance(value, RemotePath):
                value = value.url
            env[ENV_PREFIX + f.name.upper()] = "" if value is None else str(value)
        return env

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``NOA_<FIELD>`` variables, then ``overrides`` (None values are ignored)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            text = env.get(ENV_PREFIX + field.name.upper())
            if text is not None and text != "":
                values[field.name] = _parse(field.name, text)
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "cors_origins" in values:
            values["cors_origins"] = tuple(values["cors_origins"])
        return cls(**values)


def _parse(name: str, text: str) -> Any:
    if name in ("max_body_bytes", "max_voxels", "workers", "processes", "job_ttl", "max_expressions"):
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{ENV_PREFIX}{name.upper()}={text!r} is not an integer") from None
    if name == "cors_origins":
        return tuple(part.strip() for part in text.split(",") if part.strip())
    if name in ("api_key", "database", "scheduler"):
        return text
    if name == "warmup":
        if text.lower() not in ("0", "1", "true", "false", "yes", "no"):
            raise ValueError(f"{ENV_PREFIX}{name.upper()}={text!r} is not 0 or 1")
        return text.lower() in ("1", "true", "yes")
    if name == "data_root":
        return as_path(text)  # a URL kept as one (Path would make s3://b/p s3:/b/p)
    return Path(text)
