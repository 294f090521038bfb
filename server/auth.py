"""The optional API key (X-API-Key): checked by an ASGI middleware, compared in constant time.

The check runs before routing, so an unauthenticated client cannot make the server read (and
spool) an upload first. The route dependency only declares the scheme in the OpenAPI document.
"""

from __future__ import annotations

import hmac
import json

from fastapi.security import APIKeyHeader
from starlette.types import ASGIApp, Receive, Scope, Send

from noa_server.problems import MEDIA_TYPE, problem_body

HEADER = "X-API-Key"
declare_key = APIKeyHeader(name=HEADER, auto_error=False, description="The key the server was started with.")


class ApiKeyMiddleware:
    """Refuse requests under ``prefix`` without the right X-API-Key (401 problem)."""

    def __init__(self, app: ASGIApp, key: str, prefix: str = "/v1/"):
        self.app = app
        self.key = key.encode()
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        given = next((value for name, value in scope["headers"] if name == HEADER.lower().encode()), None)
        # compare_digest takes as long whatever prefix matches, so timing reveals nothing of the key.
        if given is not None and hmac.compare_digest(given, self.key):
            await self.app(scope, receive, send)
            return
        detail = f"a valid {HEADER} header is required" if given is None else f"invalid {HEADER}"
        body = json.dumps(problem_body(401, detail, scope["path"], slug="unauthorized", title="Unauthorized")).encode()
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", MEDIA_TYPE.encode()), (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", f'APIKey header="{HEADER}"'.encode())]})
        await send({"type": "http.response.body", "body": body})
