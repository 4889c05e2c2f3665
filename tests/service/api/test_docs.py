"""The API docs pages (/docs, /redoc) work offline: every script, style and icon they reference is
served by the app itself from the package's vendored copies, and they stay public like the OpenAPI
document they load. In process (the pages need no worker); the app's lifespan still opens a database."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import STATIC_DIR, create_app
from service.config import Settings
from storage.session import default_url

# what each kind of asset must be served as, and the least size a real copy has
ASSET_KINDS = {".js": ("javascript", 100_000), ".css": ("text/css", 50_000), ".png": ("image/png", 100)}


class _Links(HTMLParser):
    """The URLs a page makes the browser load: <script src>, <link href>, <img src>."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        wanted = {"script": "src", "link": "href", "img": "src"}.get(tag)
        self.urls += [value for name, value in attrs if name == wanted and value]


def _settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir, database_url=default_url(data_dir), embedded_worker=False)


def _links(html: str) -> list[str]:
    parser = _Links()
    parser.feed(html)
    return parser.urls


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    # no request sends an Authorization header
    with TestClient(create_app(_settings(tmp_path_factory.mktemp("docs")))) as c:
        yield c


@pytest.mark.parametrize(("page", "expected"), [("/docs", 3), ("/redoc", 2)])
def test_docs_page_loads_only_local_assets(client: TestClient, page: str, expected: int) -> None:
    response = client.get(page)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    assert re.search(r"https?:|//[\w.-]+\.\w", html) is None, "the page names another host"
    urls = _links(html)
    assert len(urls) == expected, urls  # scripts, styles and the icon
    for url in urls:
        assert url.startswith("/static/vendor/"), url
        kind, least = ASSET_KINDS[Path(url).suffix]
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert kind in asset.headers["content-type"], (url, asset.headers["content-type"])
        assert len(asset.content) >= least, url
        assert asset.content == (STATIC_DIR / url.removeprefix("/static/")).read_bytes()


def test_docs_pages_and_their_spec_stay_public_while_the_api_needs_a_key(client: TestClient) -> None:
    assert client.get("/openapi.json").json()["info"]["title"] == "temper"  # what both pages load
    assert "/openapi.json" in client.get("/docs").text and "/openapi.json" in client.get("/redoc").text
    assert client.get("/docs/oauth2-redirect").status_code == 200
    assert client.get("/v1/models").status_code == 401
    assert client.get("/static/vendor/no-such-file.js").status_code == 404


def test_docs_urls_follow_the_root_path(tmp_path: Path) -> None:
    """Behind a proxy that mounts the API under a prefix, the pages ask for assets under it too."""
    with TestClient(create_app(_settings(tmp_path)), root_path="/temper") as c:
        html = c.get("/docs").text
    assert all(url.startswith("/temper/static/vendor/") for url in _links(html))
    assert "/temper/openapi.json" in html


def test_vendored_assets_carry_their_licenses_and_the_versions_the_readme_names() -> None:
    vendor = STATIC_DIR / "vendor"
    notes = (vendor / "README.md").read_text()
    for directory, bundle in (("swagger-ui", "swagger-ui-bundle.js"), ("redoc", "redoc.standalone.js")):
        assert (vendor / directory / "LICENSE").stat().st_size > 500, directory
        row = re.search(rf"^\| `{directory}/` \| [\w-]+ \| ([\d.]+) \|", notes, re.MULTILINE)
        assert row is not None, directory
        assert f'"{row[1]}"' in (vendor / directory / bundle).read_text(), (directory, row[1])
