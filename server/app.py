"""The app factory: ``create_app(settings)`` wires routes, errors, limits, auth and CORS.

``uvicorn --factory noa_server.app:create_app`` (the container) builds the settings from ``NOA_*``
environment variables; ``noa serve`` passes its own.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

from fastapi import FastAPI, Security
from fastapi.middleware.cors import CORSMiddleware
from fastapi.routing import APIRoute

from noa_core import SUMMARY, __version__, operations
from noa_server import problems
from noa_server.auth import HEADER, ApiKeyMiddleware, declare_key
from noa_server.limits import BodyLimitMiddleware
from noa_server.routes import health, jobs, paths, queries, uploads, view, watches
from noa_server.service import Service
from noa_server.settings import Settings

DESCRIPTION = SUMMARY + """

Two ways to give data: **upload** the file(s) (`/v1/upload/...`, the result comes back), or name
files under the server's data root (`/v1/paths/...` and `/v1/jobs`, outputs are written there and
can be downloaded from `/v1/files/...`). Errors are `application/problem+json` (RFC 9457).
"""


# route modules under /v1 (behind the API key), built from the registry
VERSIONED = (uploads, paths, jobs, watches, view, queries)
VERSION = "/v1"  # the prefix of the VERSIONED routes


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()
    svc = Service(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        svc.start()
        yield
        svc.stop()

    app = FastAPI(title="noa", version=__version__, description=DESCRIPTION, lifespan=lifespan,
                  openapi_url="/openapi.json", docs_url="/docs", redoc_url=None)
    app.state.service = svc
    problems.install(app)

    versioned = [module.router(operations.operations()) for module in VERSIONED]
    # For the Allow header of a 405, which must name the methods of every route at that path.
    app.state.route_methods = [
        (re.compile("^" + re.escape(prefix) + route.path_regex.pattern.removeprefix("^")), route.methods)
        for prefix, routers in (("", [health.router, view.page]), (VERSION, versioned))
        for routes in routers
        for route in cast(list[APIRoute], routes.routes)  # the routers' own routes: every one an APIRoute
    ]
    guarded: dict[str, Any] = {}
    if settings.api_key is not None:
        guarded = {"dependencies": [Security(declare_key)], "responses": problems.documented(401)}
    app.include_router(health.router)
    app.include_router(view.page)  # the viewer's page: no data in it, so not behind the key
    # Each router straight under the app, not beneath a /v1 router: a request is matched against half the routes
    # (FastAPI matches a nested router's routes once to choose it, then again to pick the route).
    for routes in versioned:
        app.include_router(routes, prefix=VERSION, **guarded)

    # Added last = outermost. The key is checked before the body is counted, and CORS headers reach
    # even these early refusals.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    if settings.api_key is not None:
        app.add_middleware(ApiKeyMiddleware, key=settings.api_key)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST", "DELETE"], allow_headers=[HEADER, "Content-Type"],
                           expose_headers=["Location", "Content-Disposition", "Noa-Notices"])

    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = problems.finish_openapi(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
