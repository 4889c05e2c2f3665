"""The HTTP API: `create_app(settings)` builds it; its lifespan opens what requests share.

Nothing is opened at import time. The lifespan opens the database (migrating it), the blob store
and, with `settings.embedded_worker`, a worker thread in this process, so `temper serve` alone is a
whole deployment. Job state lives in the database, so stopping the app loses nothing: a job whose
worker went away is taken over when its lease expires.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy import func, select

from compiler.version import __version__
from service.config import Settings, get_settings
from service.deps import Services, auth_error
from service.errors import install_error_handlers
from service.limits import MULTIPART_SLACK, BodyLimitMiddleware
from service.metrics import JobCollector, Metrics, MetricsMiddleware
from service.routes import ROUTERS, dashboard
from storage import repos as repo
from storage.blobs import BlobStore
from storage.models import TuningRecordRow
from storage.records import SqlDatabase

log = logging.getLogger("temper.service")

STATIC_DIR = Path(__file__).parent / "static"
OPENAPI_URL = "/openapi.json"

DESCRIPTION = """\
Upload ONNX models, tune their kernels, compile them to native artifacts and download the result.

Every `/v1` route needs `Authorization: Bearer <key>` (keys come from `temper keys create`). Errors
are JSON: `{"error": {"code": "...", "message": "..."}}`.
"""


class EmbeddedWorker:
    """A service.worker.Worker in a daemon thread of the API process."""

    def __init__(self, settings: Settings, db: SqlDatabase) -> None:
        from service.worker import Worker

        self._stop = threading.Event()
        self._worker = Worker(settings, db=db)
        self._thread = threading.Thread(target=self._run, name="temper-embedded-worker", daemon=True)
        self._join_s = settings.worker_lease_s

    def _run(self) -> None:
        try:
            self._worker.run_forever(self._stop)
        except Exception:  # the API keeps serving; jobs wait for another worker
            log.exception("embedded worker stopped")

    def start(self) -> EmbeddedWorker:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the worker to stop: a running tuning job goes back to the queue after the batch in
        flight. Waits a lease at most; a job still running then is taken over when its lease expires."""
        self._stop.set()
        self._thread.join(self._join_s)
        if not self._thread.is_alive():
            self._worker.close()


def _json_errors_in_openapi(app: FastAPI) -> None:
    """Error responses are JSON on every route, also where success is text or a file (FastAPI files
    an extra response's model under the route's media type)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = generate()
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                for status, response in operation.get("responses", {}).items():
                    content = response.get("content") or {}
                    refs = [c["schema"] for c in content.values() if "ErrorOut" in str(c.get("schema", ""))]
                    if status[:1] in "45" and refs:
                        response["content"] = {"application/json": {"schema": refs[0]}}
        return schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI declares it a method; replacing it customises the schema


def _serve_docs(app: FastAPI) -> None:
    """Swagger UI at /docs and ReDoc at /redoc, with their scripts and styles served from the package
    (static/vendor, see its README) instead of FastAPI's default CDN, so the pages work offline.
    Public, like /openapi.json that they load; URLs keep the root path a proxy mounts the app under."""
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    oauth2_redirect_url = app.swagger_ui_oauth2_redirect_url or "/docs/oauth2-redirect"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        vendor = f"{root}/static/vendor/swagger-ui"
        return get_swagger_ui_html(
            openapi_url=root + OPENAPI_URL,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{vendor}/swagger-ui-bundle.js",
            swagger_css_url=f"{vendor}/swagger-ui.css",
            swagger_favicon_url=f"{vendor}/favicon-32x32.png",
            oauth2_redirect_url=root + oauth2_redirect_url,
            swagger_ui_parameters={"validatorUrl": None},  # no badge fetched from the public validator
        )

    @app.get(oauth2_redirect_url, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return get_redoc_html(
            openapi_url=root + OPENAPI_URL,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}/static/vendor/redoc/redoc.standalone.js",
            redoc_favicon_url=f"{root}/static/vendor/swagger-ui/favicon-32x32.png",
            with_google_fonts=False,
        )


def _open(settings: Settings, metrics: Metrics) -> Services:
    db = SqlDatabase(settings.database_url)  # migrates to this version's schema
    return Services(settings=settings, db=db, blobs=BlobStore(settings.blobs_dir), metrics=metrics)


def create_app(settings: Settings) -> FastAPI:
    """The API for these settings (nothing is opened until the app starts)."""
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = await run_in_threadpool(_open, settings, metrics)
        app.state.services = services
        worker = EmbeddedWorker(settings, services.db).start() if settings.embedded_worker else None
        try:
            yield
        finally:
            if worker is not None:
                await run_in_threadpool(worker.stop)
            services.db.close()

    app = FastAPI(
        title="temper",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_url=OPENAPI_URL,
        docs_url=None,  # served by _serve_docs, from the package rather than a CDN
        redoc_url=None,
        openapi_tags=[
            {"name": "models", "description": "Upload and inspect ONNX models."},
            {"name": "compilations", "description": "Compile models to artifacts."},
            {"name": "tuning", "description": "Tune the kernels of a model."},
            {"name": "artifacts", "description": "Download compiled artifacts."},
            {"name": "records", "description": "Move tuning records between deployments."},
            {"name": "health", "description": "Health and metrics."},
        ],
    )
    install_error_handlers(app, auth_error)
    for router in (*ROUTERS, dashboard.router):
        app.include_router(router)
    _json_errors_in_openapi(app)
    _serve_docs(app)

    def count_jobs() -> Mapping[tuple[str, str], int]:
        services: Services = app.state.services
        with services.db.read_session() as session:
            return {
                (str(kind), str(state)): n for (kind, state), n in repo.count_jobs_by_state(session).items()
            }

    def count_trials() -> int:
        services: Services = app.state.services
        with services.db.read_session() as session:
            return int(session.scalar(select(func.count()).select_from(TuningRecordRow)) or 0)

    metrics.add_collector(JobCollector(count_jobs, count_trials))
    # the last added middleware runs first: time everything, then refuse bodies over the limit
    app.add_middleware(BodyLimitMiddleware, max_body=settings.max_upload_bytes + MULTIPART_SLACK)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app


def app_from_environment() -> FastAPI:
    """A factory for `uvicorn --factory service.app:app_from_environment` (settings from TEMPER_*)."""
    return create_app(get_settings())
