"""A real `temper serve` process on loopback for the API tests: start, stop, restart, keys, peeking.

The server runs as the CLI runs it (`python -m service.cli serve`), configured only through TEMPER_*
variables, with its log in a file that failures quote. Tests look at the database and the blob
directory directly to check that refused requests stored nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import func, select

from service.config import Settings, get_settings
from storage import SqlDatabase
from storage import repos as repo
from storage.models import ArtifactRow, CompilationRow, ModelRow, TuningJobRow

REPO = Path(__file__).resolve().parents[3]
TABLES = {
    "models": ModelRow,
    "compilations": CompilationRow,
    "tuning_jobs": TuningJobRow,
    "artifacts": ArtifactRow,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LiveServer:
    """One API process; `env` holds its TEMPER_* settings."""

    data_dir: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"server-{self.port}.log"

    def settings(self) -> Settings:
        """The settings the server sees (same variables, read here)."""
        fields = {
            k.removeprefix("TEMPER_").lower(): v for k, v in self.env.items() if k.startswith("TEMPER_")
        }
        return get_settings(**fields)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def start(self, timeout: float = 60.0) -> LiveServer:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPER_")}
        env.update(self.env)
        cmd = [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        with open(self.log_path, "ab") as log:
            # a session of its own: the server's helper processes (worker pools) share its group
            self.proc = subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop(signal.SIGKILL)
        raise RuntimeError(f"server did not become healthy in {timeout} s:\n{self.log_tail()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 90.0) -> int | None:
        """Signal the server and wait for it to exit (SIGKILL after `timeout`); its exit code.

        Whatever the server left behind in its process group (pool processes orphaned by a SIGKILL)
        is killed afterwards, as a container's teardown would.
        """
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.returncode

    # --- the database and blobs behind the server ------------------------------------------------

    def database(self) -> SqlDatabase:
        return SqlDatabase(self.settings().database_url)

    def create_key(self, tenant: str, *, admin: bool = False) -> str:
        with self.database() as db, db.write_session() as s:
            key, _ = repo.create_api_key(s, tenant_name=tenant, is_admin=admin)
        return key

    def row_counts(self) -> dict[str, int]:
        with self.database() as db, db.read_session() as s:
            return {
                name: int(s.scalar(select(func.count()).select_from(t)) or 0) for name, t in TABLES.items()
            }

    def blobs(self) -> list[str]:
        """Stored blob keys (the store's temporary directory excluded)."""
        root = self.settings().blobs_dir
        if not root.is_dir():
            return []
        return sorted(p.name for p in root.glob("??/*") if p.is_file() and p.parent.name != "tmp")
