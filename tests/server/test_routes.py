"""server/routes: the routers FastAPI passes over at once for a path outside their routes' first segments."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.routing import Match

from noa_server.routes import Routes


def _app() -> tuple[FastAPI, dict[str, Routes]]:
    uploads, paths, named = Routes(prefix="/upload"), Routes(), Routes()
    uploads.add_api_route("/{name}", lambda name: {"upload": name}, methods=["POST"])
    paths.add_api_route("/paths/{name}", lambda name: {"paths": name}, methods=["POST"])
    paths.add_api_route("/files/{path:path}", lambda path: {"file": path}, methods=["GET"])
    named.add_api_route("/{anything}/x", lambda anything: {"named": anything}, methods=["GET"])
    app = FastAPI()
    for routes in (uploads, paths, named):
        app.include_router(routes, prefix="/v1")
    return app, {"uploads": uploads, "paths": paths, "named": named}


@pytest.mark.parametrize("method, path, answer", [
    ("POST", "/v1/upload/copy", {"upload": "copy"}),
    ("POST", "/v1/paths/info", {"paths": "info"}),
    ("GET", "/v1/files/upload/a.mrc", {"file": "upload/a.mrc"}),  # another router's segment further in
    ("GET", "/v1/paths/x", {"named": "paths"}),  # a parameter first: that router is always tried
])
def test_each_request_reaches_its_route(method, path, answer):
    app, _ = _app()
    assert TestClient(app).request(method, path).json() == answer


def test_a_router_is_passed_over_without_trying_its_routes_for_a_path_outside_its_segments(monkeypatch):
    app, routers = _app()
    tried = []
    for name, routes in routers.items():
        for route in routes.routes:
            monkeypatch.setattr(route, "matches", lambda scope, route=route, name=name: (
                tried.append(name), type(route).matches(route, scope))[1])
    client = TestClient(app)
    assert client.post("/v1/paths/info").json() == {"paths": "info"}
    assert "uploads" not in tried and "paths" in tried
    tried.clear()
    assert client.post("/v1/nothing").status_code == 404
    assert set(tried) == {"named"}  # only the router whose first segment is a parameter
    assert routers["uploads"].matches({"type": "http", "path": "/v1/paths/info", "method": "POST"}) == (Match.NONE,
                                                                                                        {})
    assert client.get("/v1/upload/copy").status_code == 405  # a method mismatch is still told (PARTIAL)


def test_a_route_added_after_the_first_request_is_reached():
    """A route with a first segment new to its router, added once requests have been matched, is not passed over."""
    app, routers = _app()
    client = TestClient(app)
    assert client.post("/v1/paths/info").json() == {"paths": "info"}
    routers["paths"].add_api_route("/extra/{name}", lambda name: {"extra": name}, methods=["GET"])
    assert client.get("/v1/extra/a").json() == {"extra": "a"}
