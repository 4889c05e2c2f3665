"""Request dependencies: the app's services (built by the lifespan) and the caller's identity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.config import Settings
from service.errors import ForbiddenError, UnauthorizedError
from service.metrics import Metrics
from storage import repos as repo
from storage.blobs import BlobStore
from storage.records import SqlDatabase
from storage.repos import Principal

_MAX_KEY = 512


@dataclass(frozen=True)
class Services:
    """What the lifespan opens once per app and every request shares."""

    settings: Settings
    db: SqlDatabase
    blobs: BlobStore
    metrics: Metrics


def get_services(request: Request) -> Services:
    # Starlette's app state is untyped (Any); the lifespan (service.app) stores a Services there
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]

_bearer = HTTPBearer(auto_error=False, description="An API key from `temper keys create --tenant NAME`.")


def get_principal(
    services: ServicesDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The tenant behind the bearer key; 401 when the key is missing or unknown."""
    if credentials is None:
        raise UnauthorizedError("missing API key: send the header 'Authorization: Bearer <key>'")
    return authenticate(services, credentials.credentials)


def authenticate(services: Services, key: str) -> Principal:
    key = key.strip()
    principal = None
    if key and len(key) <= _MAX_KEY and key.isascii() and key.isprintable():
        with services.db.read_session() as session:
            principal = repo.authenticate(session, key)
    if principal is None:
        raise UnauthorizedError("invalid or revoked API key")
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def auth_error(request: Request) -> UnauthorizedError | None:
    """The 401 this request deserves, if any. For the one failure FastAPI finds before running
    dependencies (a body that is not JSON): a stranger hears 401, not a remark on their JSON."""
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    try:
        if scheme.lower() != "bearer" or not key.strip():
            raise UnauthorizedError("missing API key: send the header 'Authorization: Bearer <key>'")
        authenticate(get_services(request), key)
    except UnauthorizedError as exc:
        return exc
    return None


def require_admin(principal: PrincipalDep) -> Principal:
    if not principal.is_admin:
        raise ForbiddenError("this operation needs an admin API key")
    return principal


AdminDep = Annotated[Principal, Depends(require_admin)]
