"""The service tests' shared fixtures: a PostgreSQL server for the session, a fresh database on it per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from helpers import fresh_database, postgres_server


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """A PostgreSQL server of its own (loopback, no fsync): its URL, without a database; skipped when there is none."""
    with postgres_server() as (url, why):
        if url is None:
            pytest.skip(why)
        yield url


@pytest.fixture
def pg_database(postgres) -> str:
    """A fresh database on the test server: its URL."""
    return fresh_database(postgres)
