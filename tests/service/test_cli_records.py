"""`temper records export|import` and `temper db upgrade`: real SQLite files, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli import app
from storage import SqlDatabase, default_url, head_revision
from tests.storage.helpers import record, workload

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def filled(tmp_path: Path) -> str:
    """A SQLite database with two workloads and three records on two targets."""
    url = f"sqlite:///{tmp_path / 'filled.sqlite'}"
    with SqlDatabase(url) as db:
        db.commit_workload(workload())
        db.commit_workload(workload("wl-matmul"))
        db.commit_record(record(n=1))
        db.commit_record(record(n=2, target_key="skylake-def", minutes=1))
        db.commit_record(record("wl-matmul", n=3, minutes=2))
    return url


def _user_error(result, *fragments: str) -> None:  # type: ignore[no-untyped-def]
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in result.stderr


def test_help_lists_the_commands(runner: CliRunner) -> None:
    assert "records" in runner.invoke(app, ["--help"]).stdout
    assert "export" in runner.invoke(app, ["records", "--help"]).stdout
    assert "upgrade" in runner.invoke(app, ["db", "--help"]).stdout


def test_export_then_import_into_the_default_database(
    runner: CliRunner, filled: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "records.jsonl"
    result = runner.invoke(app, ["records", "export", str(out), "--db", filled])
    assert result.exit_code == 0, result.output
    assert "exported 3 record(s) of 2 workload(s)" in result.stdout
    assert json.loads(out.read_text().splitlines()[0]) == {"format": "temper-records", "version": 1}

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = runner.invoke(app, ["records", "import", str(out)])
    assert result.exit_code == 0, result.output
    assert "imported 3 record(s) and 2 new workload(s)" in result.stdout
    assert (work / ".temper" / "temper.sqlite").is_file()
    result = runner.invoke(app, ["records", "import", str(out)])
    assert result.exit_code == 0, result.output
    assert "imported 0 record(s)" in result.stdout and "3 record(s) were already there" in result.stdout
    with SqlDatabase(default_url()) as db:
        assert len(list(db.iter_records())) == 3


def test_export_one_target(runner: CliRunner, filled: str, tmp_path: Path) -> None:
    out = tmp_path / "skylake.jsonl"
    result = runner.invoke(app, ["records", "export", str(out), "--db", filled, "--target", "skylake-def"])
    assert result.exit_code == 0, result.output
    assert "exported 1 record(s) of 1 workload(s)" in result.stdout
    records = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    assert [r["target_key"] for r in records if r["kind"] == "record"] == ["skylake-def"]


def test_db_upgrade_creates_the_database(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "new" / "t.sqlite"
    result = runner.invoke(app, ["db", "upgrade", "--db", f"sqlite:///{path}"])
    assert result.exit_code == 0, result.output
    assert f"is at revision {head_revision()}" in result.stdout
    assert path.is_file()


def test_import_of_a_corrupt_file_stores_nothing(runner: CliRunner, filled: str, tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    assert runner.invoke(app, ["records", "export", str(out), "--db", filled]).exit_code == 0
    lines = out.read_text().splitlines()
    lines[2] = "{broken"
    out.write_text("\n".join(lines) + "\n")
    target = f"sqlite:///{tmp_path / 'target.sqlite'}"
    result = runner.invoke(app, ["records", "import", str(out), "--db", target])
    _user_error(result, "records.jsonl, line 3: invalid JSON")
    with SqlDatabase(target) as db:
        assert db.workloads() == [] and list(db.iter_records()) == []


def test_export_without_a_database_is_an_error(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["records", "export", "out.jsonl"])
    _user_error(result, "no database at", "temper.sqlite")
    assert not (tmp_path / ".temper").exists()
    assert not (tmp_path / "out.jsonl").exists()


def test_export_to_a_missing_directory(runner: CliRunner, filled: str, tmp_path: Path) -> None:
    result = runner.invoke(app, ["records", "export", str(tmp_path / "no" / "x.jsonl"), "--db", filled])
    _user_error(result, "cannot write", "No such file or directory")


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        (["db", "upgrade"], "cannot open database postgresql+psycopg://postgres:***@127.0.0.1:1/test"),
        (["records", "import", "FILE"], "Connection refused"),
    ],
)
def test_unreachable_database(runner: CliRunner, tmp_path: Path, command: list[str], fragment: str) -> None:
    file = tmp_path / "r.jsonl"
    file.write_text('{"format": "temper-records", "version": 1}\n')
    args = [str(file) if a == "FILE" else a for a in command]
    result = runner.invoke(
        app, [*args, "--db", "postgresql+psycopg://postgres:pw@127.0.0.1:1/test?connect_timeout=3"]
    )
    _user_error(result, fragment)
    assert ":pw@" not in result.stderr


def test_bad_url(runner: CliRunner) -> None:
    _user_error(runner.invoke(app, ["db", "upgrade", "--db", "nonsense"]), "cannot open database nonsense")


def test_import_of_a_missing_file_is_a_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["records", "import", str(tmp_path / "absent.jsonl")])
    assert result.exit_code == 2
    assert "does not exist" in result.output


def test_subprocess_error_line(filled: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "temper-records", "version": 9}\n')
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "records", "import", str(bad), "--db", filled],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {bad}, line 1: unsupported records format version 9")
    assert "Traceback" not in done.stderr


def test_list_shows_ids_kernels_times_and_the_best_records(runner: CliRunner, filled: str) -> None:
    result = runner.invoke(app, ["records", "list", "--db", filled, "--json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert listed["total"] == 3
    rows = listed["records"]
    assert {r["target_key"] for r in rows} == {"znver3-abc", "skylake-def"}
    assert all(r["id"] and r["seconds"] > 0 and r["created"] and r["name"] for r in rows)
    table = runner.invoke(app, ["records", "list", "--db", filled])
    assert table.exit_code == 0 and "3 record(s)" in table.stdout
    for r in rows:
        assert str(r["id"]) in table.stdout
    one = runner.invoke(app, ["records", "list", "--db", filled, "--target", "skylake-def", "--json"])
    assert [r["target_key"] for r in json.loads(one.stdout)["records"]] == ["skylake-def"]
    best = json.loads(runner.invoke(app, ["records", "list", "--db", filled, "--best", "--json"]).stdout)
    pairs = [(r["workload_key"], r["target_key"]) for r in best["records"]]
    assert len(pairs) == len(set(pairs)) == 3


def test_targets_are_named_and_unknown_ones_are_errors(
    runner: CliRunner, filled: str, tmp_path: Path
) -> None:
    targets = runner.invoke(app, ["records", "targets", "--db", filled])
    assert targets.exit_code == 0, targets.output
    assert "znver3-abc" in targets.stdout and "another machine's feature set" in targets.stdout
    for command in (["list"], ["export", str(tmp_path / "x.jsonl")]):
        unknown = runner.invoke(app, ["records", *command, "--db", filled, "--target", "pentium9"])
        _user_error(unknown, "unknown target 'pentium9'")
        absent = runner.invoke(app, ["records", *command, "--db", filled, "--target", "haswell"])
        _user_error(absent, "no records of target haswell-", "targets with records: ")
    assert not (tmp_path / "x.jsonl").exists()
