"""Running the service (``noa serve``): one uvicorn process, or several.

Several processes, because request handling is Python code that one process runs on one core at a
time (the GIL), and its threads then spend their time handing the GIL over instead of working.

On Linux each process listens on its own socket bound with ``SO_REUSEPORT``, and the kernel spreads
new connections over them. (With one shared socket, whichever process wakes first accepts a whole
burst of connections, and a client's keep-alive connections can all end up in one process.) The
parent supervises: it replaces a process that died (that process's running jobs then read as
interrupted), and on SIGTERM or SIGINT stops them all gracefully. Elsewhere, uvicorn's own workers.

A process that has compiled ``max_expressions`` client expressions stops gracefully once idle
(numba never gives compiled code back): the parent starts a fresh one in its place, and a lone
process (``--processes 1``) executes itself anew, keeping its pid.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn

from noa_server import service
from noa_server.app import create_app
from noa_server.settings import Settings

FACTORY = "noa_server.app:create_app"
CRASH_LIMIT, CRASH_WINDOW_S = 5, 60.0  # more deaths than this in the window: give up instead of looping
RETIRED_EXIT = 75  # a process that stopped to be replaced (EX_TEMPFAIL), not one that died
STOP_TIMEOUT_S = 30.0


def prepare(settings: Settings, host: str, port: int, log_level: str,
            on_listening: Callable[[], None] = lambda: None) -> tuple[Callable[[], None], int]:
    """Check the settings (by building the app) and claim the port: the function that serves until
    stopped, and the port (the one picked for port 0). ``on_listening()`` is called once, when every
    server process accepts connections. Raises ValueError for a bad setting and OSError for a port
    that cannot be had."""
    app = create_app(settings)
    # A plain bind first: it fails when anything holds the port, where uvicorn would fail only after
    # starting up, and SO_REUSEPORT would even join another server's port. (It picks one for port 0.)
    with _socket(host) as probe:
        probe.bind((host, port))
        port = probe.getsockname()[1]
    if settings.processes == 1:
        return (lambda: _serve_alone(app, host, port, log_level, on_listening)), port
    # Every process builds its app from the factory, which reads the settings from the environment.
    os.environ.update(settings.to_env())
    if not sys.platform.startswith("linux"):  # SO_REUSEPORT spreads connections only on Linux
        def serve_with_workers() -> None:
            on_listening()  # uvicorn's own supervisor says when its workers start
            uvicorn.run(FACTORY, factory=True, workers=settings.processes, host=host, port=port, log_level=log_level)

        return serve_with_workers, port
    # Held (bound, not listening) for the whole run, so that the port stays ours.
    reserved = _listener(host, port)
    return (lambda: _supervise(reserved, settings.processes, host, log_level, on_listening)), port


def _socket(host: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: past TIME_WAIT connections
    return sock


def _listener(host: str, port: int) -> socket.socket:
    sock = _socket(host)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


class _Server(uvicorn.Server):
    """A uvicorn server that calls ``on_listening()`` once its socket accepts connections."""

    def __init__(self, config: uvicorn.Config, on_listening: Callable[[], None]):
        super().__init__(config)
        self._on_listening = on_listening

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and not self.should_exit:
            await walk_routes(self.config.loaded_app)
            # What start-up made (modules, the app: ~200,000 objects) lives as long as the process: left out of the
            # collector's full passes, each of which paused a request 80-180 ms (the viewer's p99).
            gc.collect()
            gc.freeze()
            self._on_listening()


# A path no route has: a request for it walks every router
UNROUTED_PATH = "/.noa-routes"


async def walk_routes(app: Any) -> None:
    """One request for :data:`UNROUTED_PATH` through ``app`` (ASGI, in this process): FastAPI builds the validators
    of a router's routes when a request first walks it, which cost a process's first request a quarter of a second
    (the viewer's p99 in a fresh process)."""
    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        pass

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": UNROUTED_PATH, "raw_path": UNROUTED_PATH.encode(), "query_string": b"", "root_path": "",
             "headers": [], "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 0)}
    await app(scope, receive, send)


def _serve(config: uvicorn.Config, on_listening: Callable[[], None], **run: Any) -> bool:
    """Run a uvicorn server until it stops; True when it stopped to retire (see the module doc)."""
    server = _Server(config, on_listening)
    service.on_retire(lambda: setattr(server, "should_exit", True))
    server.run(**run)
    return service.RETIRING.is_set()


def _serve_alone(app: Any, host: str, port: int, log_level: str, on_listening: Callable[[], None]) -> None:
    if _serve(uvicorn.Config(app, host=host, port=port, log_level=log_level), on_listening):
        os.execv(sys.executable, sys.orig_argv)  # the same command in a fresh process, with the same pid


def _process_main(parent: int, host: str, port: int, log_level: str, listening) -> None:
    os.setpgrp()  # a terminal's Ctrl-C reaches the parent only, which stops each process once
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: stop too when the parent is killed outright
    if os.getppid() != parent:  # the parent died before prctl
        return
    config = uvicorn.Config(FACTORY, factory=True, host=host, port=port, log_level=log_level)

    def count_in() -> None:
        with listening.get_lock():
            listening.value += 1

    if _serve(config, count_in, sockets=[_listener(host, port)]):
        sys.exit(RETIRED_EXIT)


def _supervise(reserved: socket.socket, count: int, host: str, log_level: str,
               on_listening: Callable[[], None]) -> None:
    port = reserved.getsockname()[1]
    context = multiprocessing.get_context("spawn")
    stopping = threading.Event()
    listening = context.Value("i", 0)  # processes accepting connections (replacements count again)
    told = False

    def start() -> multiprocessing.process.BaseProcess:
        process = context.Process(target=_process_main, args=(os.getpid(), host, port, log_level, listening),
                                  name="noa-server")
        process.start()
        return process

    def stop(signum: int, frame: object) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    children = [start() for _ in range(count)]
    deaths: list[float] = []
    try:
        while not stopping.wait(0.05 if not told else 0.5):
            if not told and listening.value >= count:
                told = True
                on_listening()
            for i, process in enumerate(children):
                if process.is_alive():
                    continue
                if process.exitcode == RETIRED_EXIT:
                    print("noa serve: a server process retired after compiling its expressions; starting a fresh one",
                          file=sys.stderr, flush=True)
                    children[i] = start()
                    continue
                now = time.monotonic()
                deaths = [t for t in deaths if now - t < CRASH_WINDOW_S] + [now]
                if len(deaths) > CRASH_LIMIT:
                    raise SystemExit(f"noa serve: server processes keep exiting (last with {process.exitcode}); "
                                     "stopping")
                print(f"noa serve: a server process exited with {process.exitcode}; starting another",
                      file=sys.stderr, flush=True)
                children[i] = start()
    finally:
        for process in children:
            if process.is_alive():
                process.terminate()  # SIGTERM: uvicorn finishes requests, the app records its jobs
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in children:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        reserved.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
