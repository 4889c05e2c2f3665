"""Every failure of an HTTP request as one JSON body: `{"error": {"code": ..., "message": ...}}`.

Routes raise typed errors (the API's own below, the compiler's and storage's); one handler turns
each into a status and a snake_case code through the table `_STATUS`, so the mapping from "what
went wrong" to "what the client sees" lives in one place. Anything not in the table is a bug: a 500
with a generic message (the traceback goes to the log, never to the client).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from compiler.errors import (
    CodegenError,
    CompilerError,
    ModelError,
    OverrideError,
    ScheduleError,
    ShapeError,
    UnknownNodeError,
    UnsupportedOpError,
)
from service.profiling import ProfileError
from service.sandbox import SandboxError
from storage.blobs import BlobTooLargeError
from storage.errors import DatabaseUnavailableError, RecordFileError, StorageError
from storage.repos import UnknownModelError

log = logging.getLogger("temper.service")


class ApiError(Exception):
    """A request the API refuses; subclasses fix the status and the code."""

    status: int = 400
    code: str = "bad_request"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class UnauthorizedError(ApiError):
    status, code = 401, "unauthorized"


class ForbiddenError(ApiError):
    status, code = 403, "forbidden"


class NotFoundError(ApiError):
    status, code = 404, "not_found"

    @classmethod
    def of(cls, kind: str, ident: str) -> NotFoundError:
        return cls(f"{kind} {ident!r} not found")


class PayloadTooLargeError(ApiError):
    status, code = 413, "payload_too_large"


class UnsupportedMediaTypeError(ApiError):
    status, code = 415, "unsupported_media_type"


class InvalidInputError(ApiError):
    status, code = 422, "invalid_input"


# (error class, status, code), most specific first: the first isinstance match wins.
_STATUS: tuple[tuple[type[BaseException], int, str], ...] = (
    (UnsupportedOpError, 422, "unsupported_op"),
    (ModelError, 422, "invalid_model"),
    (ShapeError, 422, "invalid_shapes"),
    (OverrideError, 422, "invalid_override"),
    (UnknownNodeError, 422, "unknown_node"),
    (ScheduleError, 422, "invalid_schedule"),
    (CodegenError, 422, "codegen_failed"),
    (SandboxError, 422, "limit_exceeded"),
    (ProfileError, 409, "cannot_run_here"),
    (CompilerError, 422, "compile_error"),
    (RecordFileError, 422, "invalid_records"),
    (UnknownModelError, 404, "not_found"),
    (BlobTooLargeError, 413, "payload_too_large"),
    (DatabaseUnavailableError, 503, "database_unavailable"),
    (StorageError, 422, "storage_error"),
    (OperationalError, 503, "database_unavailable"),  # server down, lock timeouts
    (DataError, 422, "invalid_data"),  # a value the database refuses (e.g. NUL in a string)
)


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(error_body(code, message), status_code=status, headers=headers)


def describe_validation(errors: Sequence[Any]) -> str:
    """Pydantic/FastAPI validation errors as one line naming every field at fault."""
    parts = []
    for e in errors:
        loc = ".".join(str(p) for p in e.get("loc", ()) if p != "__root__")
        parts.append(f"{loc}: {e.get('msg', 'invalid')}" if loc else str(e.get("msg", "invalid")))
    return "; ".join(parts) or "invalid request"


def _http_code(status: int) -> str:
    return {
        400: "bad_request",
        401: "unauthorized",
        403: "forbidden",
        404: "not_found",
        405: "method_not_allowed",
        406: "not_acceptable",
        413: "payload_too_large",
        415: "unsupported_media_type",
    }.get(status, "http_error")


def to_response(exc: BaseException) -> JSONResponse:
    """The single mapping from an exception to the client's response."""
    if isinstance(exc, ApiError):
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return error_response(exc.status, exc.code, exc.message, headers)
    if isinstance(exc, RequestValidationError):
        errors = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            return error_response(
                400, "invalid_json", f"request body is not valid JSON: {describe_validation(errors)}"
            )
        return error_response(422, "invalid_request", describe_validation(errors))
    if isinstance(exc, StarletteHTTPException):
        return error_response(exc.status_code, _http_code(exc.status_code), str(exc.detail), exc.headers)
    for cls, status, code in _STATUS:
        if isinstance(exc, cls):
            message = str(exc).strip() or type(exc).__name__
            if isinstance(exc, OperationalError | DataError):
                message = f"database error: {str(exc.orig).strip().splitlines()[0] if exc.orig else code}"
            return error_response(status, code, message)
    log.error("unhandled error", exc_info=(type(exc), exc, exc.__traceback__))
    return error_response(500, "internal_error", "internal server error (see the server log)")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at the request's path (Starlette's 405 names only one route's)."""
    methods: set[str] = set()
    routes = list(request.app.routes)
    while routes:
        route = routes.pop()
        included = getattr(route, "original_router", None)  # an included APIRouter: its own routes
        if included is not None:
            routes.extend(included.routes)
            continue
        for method in getattr(route, "methods", None) or ():
            match, _ = route.matches({**request.scope, "method": method})
            if match == Match.FULL:
                methods.add(method)
    return sorted(methods)


def _is_json_error(exc: Exception) -> bool:
    return isinstance(exc, RequestValidationError) and any(
        e.get("type") == "json_invalid" for e in exc.errors()
    )


AuthCheck = Callable[[Request], Exception | None]


def install_error_handlers(app: FastAPI, auth_check: AuthCheck) -> None:
    """Route every error class (and anything else) through `to_response`. `auth_check` gives the
    401 a request deserves (service.deps.auth_error), asked first for the one failure FastAPI finds
    before running dependencies (a body that is not JSON): a stranger hears 401, not a remark on
    their JSON."""

    async def handle(request: Request, exc: Exception) -> JSONResponse:
        if _is_json_error(exc) and request.url.path.startswith("/v1/"):
            denied: Exception | None = await run_in_threadpool(auth_check, request)
            exc = denied or exc
        response = to_response(exc)
        if response.status_code == 405:
            response.headers["Allow"] = ", ".join(allowed_methods(request))
        return response

    for cls in (ApiError, RequestValidationError, StarletteHTTPException, *(c for c, _, _ in _STATUS)):
        app.add_exception_handler(cls, handle)
    app.add_exception_handler(Exception, handle)
