"""One APIRouter per resource; `ROUTERS` is the order the app mounts them in."""

from service.routes import artifacts, compilations, health, models, records, tuning

ROUTERS = (
    health.router,
    models.router,
    compilations.router,
    tuning.router,
    artifacts.router,
    records.router,
)

__all__ = ["ROUTERS"]
