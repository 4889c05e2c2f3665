"""The request-body size limit, enforced before a large body is read or spooled to disk.

A declared Content-Length over the limit is refused at once (413) without reading the body; a body
without one (chunked) is counted as it arrives and refused when it passes the limit. Routes check
the exact size of an uploaded file against TEMPER_MAX_UPLOAD_BYTES themselves; this layer only
stops bodies that are too large whatever they hold.
"""

from __future__ import annotations

import contextlib
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MULTIPART_SLACK = 64 * 1024  # room for multipart boundaries, part headers and small form fields


class _TooLarge(Exception):
    pass


def _body(message: str) -> bytes:
    return json.dumps({"error": {"code": "payload_too_large", "message": message}}).encode()


class BodyLimitMiddleware:
    """413 for request bodies over `max_body` bytes."""

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def _refuse(self, send: Send, message: str) -> None:
        body = _body(message)
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_body
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._refuse(send, f"request body is {int(declared)} bytes; the limit is {limit} bytes")
            return
        received = 0
        exceeded = False
        started = False

        async def counting_receive() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    exceeded = True
                    raise _TooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded:  # whatever the app answers to the cut-off body, the client hears 413
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        with contextlib.suppress(_TooLarge):
            await self.app(scope, counting_receive, guarded_send)
        if exceeded and not started:
            await self._refuse(send, f"request body is over the limit of {limit} bytes")
