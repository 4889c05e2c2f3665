"""What the dashboard's browser tests share: the Chromium to drive and how, the live server with its
key, and pages that record their console errors and requests (the fixtures are in conftest.py)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx

from tests.models.builders import small_conv_model
from tests.service.api.server import LiveServer

if TYPE_CHECKING:
    from playwright.sync_api import ConsoleMessage, Page

CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
VIEWPORT = {"width": 1280, "height": 800}
TIMEOUT_MS = 120_000  # compiling a kernel's stages or a tuning round can take a while on a busy machine


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Dashboard:
    """A live server with an admin key, and the bytes of the small model the tests upload."""

    server: LiveServer
    key: str
    model_bytes: bytes = field(default_factory=lambda: small_conv_model().SerializeToString())

    @property
    def url(self) -> str:
        return f"{self.server.url}/"

    def api(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.server.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=300
        )


@dataclass
class Watched:
    """A page with what it logged: console errors, uncaught exceptions, and every URL it requested."""

    page: Page
    errors: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)

    def unexpected_errors(self, allowed: tuple[str, ...] = ()) -> list[str]:
        return [e for e in self.errors if not any(a in e for a in allowed)]


def watch(page: Page) -> Watched:
    watched = Watched(page)

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            watched.errors.append(message.text)

    page.on("console", on_console)
    page.on("pageerror", lambda exc: watched.errors.append(f"uncaught: {exc}"))
    page.on("request", lambda req: watched.urls.append(req.url))
    page.set_default_timeout(TIMEOUT_MS)
    return watched
