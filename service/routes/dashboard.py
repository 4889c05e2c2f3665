"""The web dashboard at `/`: one static page (service/static/dashboard) whose ES modules call the API.

The page itself is public, like the docs pages; everything it shows comes from `/v1` requests that
carry the API key the user signs in with (kept in the browser's sessionStorage, sent as a bearer
header, never put in a URL). Its scripts and styles are served from `/static`, so it works offline.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

DASHBOARD_DIR = Path(__file__).resolve().parents[1] / "static" / "dashboard"
INDEX = DASHBOARD_DIR / "index.html"

# Only this origin's scripts run and only this origin is called; styles may be set from script
# (uPlot sizes its canvas that way); downloads are saved through blob: URLs.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)

router = APIRouter(include_in_schema=False)


@router.get("/")
def dashboard() -> FileResponse:
    """The dashboard's page (hash routes such as `/#/models` pick the view in the browser)."""
    return FileResponse(
        INDEX,
        media_type="text/html; charset=utf-8",
        headers={
            "Content-Security-Policy": CONTENT_SECURITY_POLICY,
            "Cache-Control": "no-cache",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
        },
    )
