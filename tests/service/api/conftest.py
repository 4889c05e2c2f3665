"""Live servers for the API tests: each a real `temper serve` process on a free loopback port."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from service.client import Client
from tests.service.api.server import LiveServer
from tests.storage.conftest import pg_url, pg_user, sqlite_url  # noqa: F401  (fixtures)

UPLOAD_LIMIT = 100_000  # bytes: the small models fit, the PP-LCNet file (6.8 MB) does not

ServerFactory = Callable[..., LiveServer]


def _env(data_dir: Path, database_url: str | None, extra: dict[str, str]) -> dict[str, str]:
    env = {
        "TEMPER_DATA_DIR": str(data_dir),
        "TEMPER_JOB_POLL_S": "0.2",
        "TEMPER_WORKER_LEASE_S": "4",
        "TEMPER_EMBEDDED_WORKER": "true",
    }
    if database_url is not None:
        env["TEMPER_DATABASE_URL"] = database_url
    env.update(extra)
    return env


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[ServerFactory]:
    """Start servers for one test (stopped afterwards): `start_server(database_url=None, **TEMPER_vars)`."""
    servers: list[LiveServer] = []

    def start(database_url: str | None = None, **extra: str) -> LiveServer:
        data_dir = tmp_path / f"data{len(servers)}"
        server = LiveServer(data_dir, _env(data_dir, database_url, extra))
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def idle_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server without a worker (jobs stay queued) and a small upload limit, for the error tests."""
    data_dir = tmp_path_factory.mktemp("idle") / "data"
    env = _env(
        data_dir, None, {"TEMPER_EMBEDDED_WORKER": "false", "TEMPER_MAX_UPLOAD_BYTES": str(UPLOAD_LIMIT)}
    )
    server = LiveServer(data_dir, env).start()
    yield server
    server.stop()


@pytest.fixture
def client_for() -> Iterator[Callable[[LiveServer, str], Client]]:
    """Clients for (server, key), closed after the test."""
    clients: list[Client] = []

    def make(server: LiveServer, key: str) -> Client:
        clients.append(Client(server.url, key, timeout=300))
        return clients[-1]

    yield make
    for c in clients:
        c.close()
