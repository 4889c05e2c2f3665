"""Several processes writing one database at once lose nothing; a killed writer keeps its commits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from storage import SqlDatabase

REPO = Path(__file__).resolve().parents[2]


def _writer(url: str, tag: str, count: int, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.storage.write_records", url, tag, str(count), *extra],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_writers_at_once_lose_nothing(db_url: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    count = 150
    writers = [_writer(db_url, tag, count, "--go", str(go)) for tag in ("a", "b")]
    time.sleep(0.2)  # both are importing/opening (and migrating the same new database) meanwhile
    go.touch()
    for proc in writers:
        stdout, stderr = proc.communicate(timeout=180)
        assert proc.returncode == 0, stderr
        assert stdout.strip() == "done"

    with SqlDatabase(db_url) as db:
        assert [w.key for w in db.workloads()].count("shared") == 1
        assert {w.key for w in db.workloads()} == {"shared", "own-a", "own-b"}
        for tag in ("a", "b"):
            mine = list(db.iter_records(f"target-{tag}"))
            assert len(mine) == count
            assert sorted(r.trace["decisions"]["n"] for r in mine) == list(range(count))
            assert len(db.records("shared", f"target-{tag}")) == count // 2
        assert len({r.id for r in db.iter_records()}) == 2 * count


def test_records_committed_before_a_kill_are_kept(db_url: str) -> None:
    proc = _writer(db_url, "k", 20, "--hang")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "done", proc.stderr.read() if proc.stderr else ""
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    with SqlDatabase(db_url) as db:
        assert len(list(db.iter_records("target-k"))) == 20
