"""Size limits: request bodies, checked while they stream in. (Voxel counts are checked by the library, given the
service's limit: each input from its header as it is read, several together before any is read, and each output
while it is planned; see :mod:`noa_core.limits` and :mod:`noa_core.run.execution`.)"""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from noa_server.problems import MEDIA_TYPE, problem_body


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` once the body passes the limit.

    An HTTPException so that FastAPI's body parsing re-raises it as is (any other exception there
    becomes a generic 400), and the app's handler answers with a 413 problem.
    """

    slug, title = "body-too-large", "Request body too large"

    def __init__(self, limit: int):
        # The rest of the body is never read, so the connection cannot be reused.
        super().__init__(413, f"the request body is larger than the limit of {limit} bytes", {"Connection": "close"})


class BodyLimitMiddleware:
    """Refuse bodies over ``max_bytes``: by Content-Length before the app runs, else while counting chunks.

    Counting in ``receive`` means a chunked upload is stopped at the first chunk past the limit,
    not after the whole body was buffered or spooled to disk.
    """

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, send)
            return

        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def watching_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, watching_send)
        except BodyTooLarge:
            # Normally the app's handler already answered; this covers a read outside a route.
            if started:
                raise
            await self._refuse(scope, send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        error = BodyTooLarge(self.max_bytes)
        body = json.dumps(problem_body(413, error.detail, scope["path"], slug=error.slug, title=error.title)).encode()
        await send({"type": "http.response.start", "status": 413, "headers": [
            (b"content-type", MEDIA_TYPE.encode()), (b"content-length", str(len(body)).encode()),
            (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
