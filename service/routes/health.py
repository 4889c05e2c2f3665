"""/healthz (is the API up and its database reachable) and /metrics (Prometheus); no key needed."""

from __future__ import annotations

from fastapi import APIRouter, Response
from sqlalchemy import text

from compiler.version import __version__
from service.deps import ServicesDep
from service.routes.common import errors
from service.schemas import HealthOut

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness and database check", responses=errors(503))
def healthz(services: ServicesDep) -> HealthOut:
    with services.db.read_session() as session:
        session.execute(text("SELECT 1"))  # an unreachable database is a 503 through the error handler
    return HealthOut(status="ok", version=__version__, database=services.db.engine.dialect.name)


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text exposition."}},
)
def metrics(services: ServicesDep) -> Response:
    body, content_type = services.metrics.exposition()
    return Response(body, media_type=content_type)
