"""The dashboard's files without a browser: `/` serves its page with a strict content security
policy, everything the page and its ES modules load is in the package and served under /static,
and none of the dashboard's own files names another host (no CDN). In process, no worker."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath

import pytest
from fastapi.testclient import TestClient

from service.app import STATIC_DIR, create_app
from service.config import Settings
from service.routes.dashboard import DASHBOARD_DIR
from storage.session import default_url

IMPORT = re.compile(r"""^\s*(?:import|export)\s[^"']*?from\s+["']([^"']+)["']""", re.MULTILINE)
HOST = re.compile(r"https?:|//[\w-]+\.[\w.-]+/")


class _Assets(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        wanted = {"script": "src", "link": "href"}.get(tag)
        self.urls += [value for name, value in attrs if name == wanted and value]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    data_dir = tmp_path_factory.mktemp("dashboard-static")
    settings = Settings(data_dir=data_dir, database_url=default_url(data_dir), embedded_worker=False)
    with TestClient(create_app(settings)) as c:
        yield c


def test_root_serves_the_dashboard_page_publicly_with_a_strict_policy(client: TestClient) -> None:
    response = client.get("/")  # no key: the page is public, its data is not
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.content == (DASHBOARD_DIR / "index.html").read_bytes()
    policy = response.headers["content-security-policy"]
    for directive in ("script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"):
        assert directive in policy
    assert client.get("/v1/models").status_code == 401
    assert "/" not in client.get("/openapi.json").json()["paths"]  # not an API route


def test_everything_the_page_loads_is_served_from_the_package(client: TestClient) -> None:
    parser = _Assets()
    parser.feed(client.get("/").text)
    assert len(parser.urls) >= 5, parser.urls  # icon, three stylesheets, the app module
    for url in parser.urls:
        assert url.startswith("static/"), url  # relative: works under a proxy's path prefix too
        response = client.get(f"/{url}")
        assert response.status_code == 200, url
        assert response.content == (STATIC_DIR / url.removeprefix("static/")).read_bytes()


def _module_graph(entry: Path) -> set[Path]:
    """Every ES module the entry imports, transitively (relative specifiers only)."""
    seen: set[Path] = set()
    todo = [entry.resolve()]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        assert module.is_file(), f"missing module {module.relative_to(STATIC_DIR.resolve())}"
        if "vendor" in module.parts:
            continue  # upstream's builds: the languages and core import nothing
        for spec in IMPORT.findall(module.read_text(encoding="utf-8")):
            assert spec.startswith("./") or spec.startswith("../"), f"{module.name} imports {spec!r}"
            todo.append((module.parent / PurePosixPath(spec)).resolve())
    return seen


def test_every_module_import_resolves_and_is_served(client: TestClient) -> None:
    modules = _module_graph(DASHBOARD_DIR / "app.js")
    names = {m.name for m in modules}
    for expected in ("api.js", "ui.js", "curve.js", "code.js", "uPlot.esm.js", "core.min.js", "llvm.min.js"):
        assert expected in names, expected
    for module in modules:
        url = "/static/" + module.relative_to(STATIC_DIR.resolve()).as_posix()
        response = client.get(url)
        assert response.status_code == 200, url
        assert "javascript" in response.headers["content-type"], url
    on_disk = {p.resolve() for p in DASHBOARD_DIR.rglob("*.js")}
    assert on_disk <= modules, f"modules nothing imports: {sorted(p.name for p in on_disk - modules)}"


def test_the_dashboards_own_files_name_no_other_host() -> None:
    for path in DASHBOARD_DIR.rglob("*"):
        if path.is_file():
            assert HOST.search(path.read_text(encoding="utf-8")) is None, path.name
