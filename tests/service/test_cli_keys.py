"""`temper keys` and the default database every command shares (TEMPER_DATA_DIR / TEMPER_DATABASE_URL)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from service.cli import app
from storage import SqlDatabase
from storage import repos as repo


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"TEMPER_DATA_DIR": str(tmp_path / "data"), "TEMPER_DATABASE_URL": "", **extra}


def test_keys_create_prints_the_key_last_and_stores_only_its_hash(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["keys", "create", "--tenant", "acme"], env=_env(tmp_path))
    assert result.exit_code == 0, result.output
    key = result.stdout.split()[-1]
    assert f"stored in sqlite:///{tmp_path / 'data' / 'temper.sqlite'}" in result.stderr  # which database
    admin = runner.invoke(app, ["keys", "create", "--tenant", "acme", "--admin"], env=_env(tmp_path))
    assert admin.exit_code == 0, admin.output
    admin_key = admin.stdout.split()[-1]
    database = tmp_path / "data" / "temper.sqlite"  # TEMPER_DATA_DIR decides where the database is
    assert database.is_file() and key.encode() not in database.read_bytes()
    with SqlDatabase(f"sqlite:///{database}") as db, db.read_session() as s:
        user = repo.authenticate(s, key)
        boss = repo.authenticate(s, admin_key)
    assert user is not None and user.tenant_name == "acme" and not user.is_admin
    assert boss is not None and boss.is_admin and boss.tenant_id == user.tenant_id

    listed = runner.invoke(app, ["keys", "list"], env=_env(tmp_path))
    assert listed.exit_code == 0 and key[:8] in listed.stdout and key not in listed.stdout
    revoked = runner.invoke(app, ["keys", "revoke", "1"], env=_env(tmp_path))
    assert revoked.exit_code == 0 and "revoked key 1" in revoked.stdout
    with SqlDatabase(f"sqlite:///{database}") as db, db.read_session() as s:
        assert repo.authenticate(s, key) is None


def test_database_url_setting_wins_and_db_flag_wins_over_it(tmp_path: Path) -> None:
    runner = CliRunner()
    url = f"sqlite:///{tmp_path / 'elsewhere.sqlite'}"
    result = runner.invoke(app, ["db", "upgrade"], env=_env(tmp_path, TEMPER_DATABASE_URL=url))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "elsewhere.sqlite").is_file() and not (tmp_path / "data").exists()
    flag = f"sqlite:///{tmp_path / 'flag.sqlite'}"
    result = runner.invoke(app, ["keys", "create", "--tenant", "t", "--db", flag], env=_env(tmp_path))
    assert result.exit_code == 0 and (tmp_path / "flag.sqlite").is_file()


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["keys", "create", "--tenant", "  "], env=_env(tmp_path))
    assert result.exit_code == 2 and "tenant name" in result.output
    result = runner.invoke(app, ["keys", "revoke", "42"], env=_env(tmp_path))
    assert result.exit_code == 2 and "no API key 42" in result.output
    result = runner.invoke(app, ["keys", "list"], env=_env(tmp_path, TEMPER_WORKER_LEASE_S="soon"))
    assert result.exit_code == 2 and "TEMPER_WORKER_LEASE_S" in result.output
    result = runner.invoke(app, ["keys", "list", "--db", "nosuchdb://x"], env=_env(tmp_path))
    assert result.exit_code == 2 and "error:" in result.output and "Traceback" not in result.output
