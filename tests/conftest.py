"""Fixtures every layer's tests share; plain helpers are in ``helpers.py`` (``from helpers import ...``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

# Service processes started by tests (`noa serve`, and in-process apps built with warmup=False) do not warm
# the kernels up in the background: dozens of them would compile the same kernels beside the tests on a cold
# cache. The warm-up has tests of its own (tests/cli/test_warmup.py).
os.environ["NOA_WARMUP"] = "0"
# One date in the label noa appends to every MRC it writes, in this process and in every process it starts (CLI
# runs, services, Dask workers): two runs compared byte for byte may straddle a minute. The date of now has its
# own test (tests/io/test_mrc.py), which unsets it.
os.environ["SOURCE_DATE_EPOCH"] = "1700000000"


@pytest.fixture
def make_client(tmp_path: Path) -> Iterator[Callable]:
    """In-process clients of the service: ``make_client(**settings)`` gives a started FastAPI TestClient
    (server errors answered as problems, not raised) of an app with those settings and a fresh temporary
    folder of its own (``tmp_path / "tmp"`` for the first); every client made is closed after the test."""
    from fastapi.testclient import TestClient

    from noa_server.app import create_app
    from noa_server.settings import Settings

    made = 0
    with ExitStack() as clients:
        def make(**settings) -> TestClient:
            nonlocal made
            made += 1
            tmp = tmp_path / ("tmp" if made == 1 else f"tmp-{made}")
            tmp.mkdir()
            app = create_app(Settings(**{"warmup": False, "tmp_dir": tmp, **settings}))
            return clients.enter_context(TestClient(app, raise_server_exceptions=False))

        yield make
