"""`temper serve` refuses what it cannot run with one line, before it listens."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from service.cli import app
from tests.service.api.server import free_port


def test_serve_reports_bad_settings_and_databases_in_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    port = str(free_port())
    base = {"TEMPER_DATA_DIR": str(tmp_path)}

    unreachable = runner.invoke(
        app,
        ["serve", "--port", port],
        env={**base, "TEMPER_DATABASE_URL": f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/none"},
    )
    assert unreachable.exit_code == 2 and "error: cannot open database" in unreachable.output
    assert "Traceback" not in unreachable.output

    bad_limit = runner.invoke(app, ["serve", "--port", port], env={**base, "TEMPER_MAX_UPLOAD_BYTES": "lots"})
    assert bad_limit.exit_code == 2 and "TEMPER_MAX_UPLOAD_BYTES" in bad_limit.output.upper()

    bad_level = runner.invoke(app, ["serve", "--log-level", "loud"], env=base)
    assert bad_level.exit_code == 2 and "not a log level" in bad_level.output
