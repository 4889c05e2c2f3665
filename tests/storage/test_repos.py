"""The service's repositories (storage.repos) on SQLite and PostgreSQL: keys, tenant isolation, the job
lifecycle and leases, and claiming from many connections at once (each job claimed by exactly one worker)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from storage import SqlDatabase
from storage import repos as repo
from storage.models import ApiKeyRow

T0 = datetime(2100, 5, 1, 12, 0, tzinfo=UTC)  # "now" for leases: later than the real clock
SHA = "ab" * 32


def _tenant_and_model(db: SqlDatabase, name: str = "acme") -> tuple[int, str]:
    with db.write_session() as s:
        tenant = repo.get_or_create_tenant(s, name=name)
        model = repo.create_model(
            s,
            tenant_id=tenant.id,
            name="mlp.onnx",
            sha256=SHA,
            size=1234,
            blob_key=SHA,
            summary={"inputs": []},
        )
    return tenant.id, model.id


def _job(db: SqlDatabase, kind: repo.JobKind, tenant_id: int, model_id: str, **params: Any) -> repo.JobInfo:
    with db.write_session() as s:
        return repo.create_job(s, kind=kind, tenant_id=tenant_id, model_id=model_id, params=params)


def _claim(db: SqlDatabase, worker: str, lease_s: float = 30, **kw: Any) -> repo.JobInfo | None:
    with db.write_session() as s:
        return repo.claim_job(s, worker_id=worker, lease_s=lease_s, **kw)


# --- tenants and keys ---------------------------------------------------------------------------


def test_api_keys_are_stored_hashed_and_authenticate(db: SqlDatabase) -> None:
    with db.write_session() as s:
        key, info = repo.create_api_key(s, tenant_name="acme")
        admin_key, admin = repo.create_api_key(s, tenant_name="acme", is_admin=True)
    assert key.startswith(repo.KEY_PREFIX) and len(key) >= 40 and key != admin_key
    assert info.prefix == key[:8] and info.tenant_name == "acme" and not info.is_admin
    assert admin.is_admin and admin.tenant_id == info.tenant_id
    with db.read_session() as s:
        stored = [row.key_hash for row in s.scalars(select(ApiKeyRow))]
        assert key not in stored and repo.hash_key(key) in stored
        assert repo.authenticate(s, key) == repo.Principal(info.tenant_id, "acme", False)
        assert repo.authenticate(s, admin_key) == repo.Principal(info.tenant_id, "acme", True)
        for bad in ("", key + "x", key[:-1], "x" * 5000):
            assert repo.authenticate(s, bad) is None
    with db.write_session() as s:
        revoked = repo.revoke_api_key(s, key_id=info.id)
        assert revoked is not None and revoked.revoked_at is not None
        assert repo.revoke_api_key(s, key_id=10_000) is None
    with db.read_session() as s:
        assert repo.authenticate(s, key) is None
        assert repo.authenticate(s, admin_key) is not None
        assert [k.id for k in repo.list_api_keys(s, "acme")] == [info.id, admin.id]
        assert repo.list_api_keys(s, "nobody") == []


def test_tenants(db: SqlDatabase) -> None:
    with db.write_session() as s:
        first = repo.create_tenant(s, name="acme")
        assert repo.get_or_create_tenant(s, name=" acme ") == first
        with pytest.raises(repo.TenantExistsError, match="acme"):
            repo.create_tenant(s, name="acme")
        with pytest.raises(ValueError, match="tenant name"):
            repo.get_or_create_tenant(s, name="  ")
        other = repo.get_or_create_tenant(s, name="globex")
    assert other.id != first.id
    with db.read_session() as s:
        assert repo.get_tenant(s, "acme") == first and repo.get_tenant(s, "nobody") is None


def test_writes_need_a_write_session_on_sqlite(sqlite_url: str) -> None:
    with SqlDatabase(sqlite_url) as db, db.read_session() as s:
        with pytest.raises(repo.NotWriteSessionError, match="write_session"):
            repo.claim_job(s, worker_id="w", lease_s=30)
        with pytest.raises(repo.NotWriteSessionError):
            repo.create_api_key(s, tenant_name="acme")


# --- models and artifacts -----------------------------------------------------------------------


def test_models_are_per_tenant_and_soft_deleted(db: SqlDatabase) -> None:
    acme, model = _tenant_and_model(db, "acme")
    globex, other = _tenant_and_model(db, "globex")
    job = _job(db, "compile", acme, model, target="host")
    with db.read_session() as s:
        assert [m.id for m in repo.list_models(s, acme)] == [model]
        got = repo.get_model(s, acme, model)
        assert got is not None and got.summary == {"inputs": []} and got.size == 1234
        assert repo.get_model(s, globex, model) is None  # another tenant's id
        assert repo.get_model(s, acme, "nope") is None
    with db.write_session() as s:
        assert repo.delete_model(s, tenant_id=globex, id=model) is False
        assert repo.delete_model(s, tenant_id=acme, id=model) is True
        assert repo.delete_model(s, tenant_id=acme, id=model) is False
        with pytest.raises(repo.UnknownModelError):
            repo.create_job(s, kind="tune", tenant_id=acme, model_id=model, params={})
        with pytest.raises(repo.UnknownModelError):  # another tenant's model
            repo.create_job(s, kind="tune", tenant_id=acme, model_id=other, params={})
    with db.read_session() as s:
        assert repo.list_models(s, acme) == [] and repo.get_model(s, acme, model) is None
        deleted = repo.get_model(s, acme, model, include_deleted=True)
        assert deleted is not None and deleted.deleted_at is not None
        assert repo.get_job(s, "compile", acme, job.id) == job  # its jobs keep working


def test_artifacts_are_per_tenant(db: SqlDatabase) -> None:
    acme, model = _tenant_and_model(db, "acme")
    globex, _ = _tenant_and_model(db, "globex")
    job = _job(db, "compile", acme, model)
    with db.write_session() as s:
        art = repo.create_artifact(
            s,
            tenant_id=acme,
            compilation_id=job.id,
            sha256=SHA,
            size=99,
            blob_key=SHA,
            manifest={"format_version": 1},
        )
    with db.read_session() as s:
        assert repo.get_artifact(s, acme, art.id) == art
        assert repo.get_artifact(s, globex, art.id) is None
        assert repo.get_artifact(s, acme, "missing") is None


# --- the job lifecycle --------------------------------------------------------------------------


def test_job_lifecycle(db: SqlDatabase) -> None:
    tenant, model = _tenant_and_model(db)
    params = {"shapes": {"input": [1, 64]}, "trials": 8}
    job = _job(db, "tune", tenant, model, **params)
    assert job.state == "queued" and job.params == params and job.attempts == 0 and job.started_at is None
    claimed = _claim(db, "w1", now=T0)
    assert claimed is not None and claimed.id == job.id and claimed.kind == "tune"
    assert claimed.state == "running" and claimed.attempts == 1 and claimed.worker_id == "w1"
    assert claimed.lease_expires_at == T0 + timedelta(seconds=30)
    assert _claim(db, "w2") is None  # nothing else to do
    with db.write_session() as s:
        assert repo.heartbeat(s, kind="tune", id=job.id, worker_id="w1", lease_s=30)
        assert not repo.heartbeat(s, kind="tune", id=job.id, worker_id="w2", lease_s=30)  # not w2's job
        assert repo.update_progress(s, id=job.id, progress={"trials_done": 3}, worker_id="w1")
        assert not repo.update_progress(s, id=job.id, progress={"trials_done": 99}, worker_id="w2")
    with db.read_session() as s:
        running = repo.get_job(s, "tune", tenant, job.id)
        assert running is not None and running.progress == {"trials_done": 3}
        assert repo.count_jobs_by_state(s)[("tune", "running")] == 1
    with db.write_session() as s:
        with pytest.raises(ValueError, match="finishes as one of"):
            repo.finish_job(s, kind="tune", id=job.id, worker_id="w1", state="running")
        assert repo.finish_job(
            s, kind="tune", id=job.id, worker_id="w1", state="succeeded", result={"trials_done": 8}
        )
        assert not repo.finish_job(s, kind="tune", id=job.id, worker_id="w1", state="failed", error="twice")
    with db.read_session() as s:
        done = repo.get_job(s, "tune", tenant, job.id)
        assert done is not None and done.state == "succeeded" and done.finished
        assert done.progress == {"trials_done": 8} and done.error is None and done.finished_at is not None
        counts = repo.count_jobs_by_state(s)
        assert counts[("tune", "succeeded")] == 1 and counts[("compile", "queued")] == 0
        assert len(counts) == 10


def test_compile_job_result_is_the_artifact_and_failures_keep_the_message(db: SqlDatabase) -> None:
    tenant, model = _tenant_and_model(db)
    ok, bad = _job(db, "compile", tenant, model), _job(db, "compile", tenant, model)
    first, second = _claim(db, "w"), _claim(db, "w")
    assert first is not None and second is not None and (first.id, second.id) == (ok.id, bad.id)
    with db.write_session() as s:
        art = repo.create_artifact(
            s, tenant_id=tenant, compilation_id=ok.id, sha256=SHA, size=10, blob_key=SHA, manifest={}
        )
        assert repo.finish_job(s, kind="compile", id=ok.id, worker_id="w", state="succeeded", result=art.id)
        assert repo.finish_job(
            s, kind="compile", id=bad.id, worker_id="w", state="failed", error="unsupported op Foo"
        )
    with db.read_session() as s:
        assert [j.id for j in repo.list_jobs(s, "compile", tenant)] == [bad.id, ok.id]  # newest first
        assert [j.id for j in repo.list_jobs(s, "compile", tenant, state="failed")] == [bad.id]
        got_ok = repo.get_job(s, "compile", tenant, ok.id)
        got_bad = repo.get_job(s, "compile", tenant, bad.id)
        assert got_ok is not None and got_ok.artifact_id == art.id
        assert got_bad is not None and got_bad.error == "unsupported op Foo" and got_bad.artifact_id is None


def test_claims_take_the_oldest_job_of_any_kind(db: SqlDatabase) -> None:
    tenant, model = _tenant_and_model(db)
    jobs = [_job(db, kind, tenant, model) for kind in ("tune", "compile", "tune", "compile")]
    assert _claim(db, "only-compile", kinds=("compile",)).id == jobs[1].id  # type: ignore[union-attr]
    order = [_claim(db, "w") for _ in jobs[1:]]
    assert [j.id for j in order if j is not None] == [jobs[0].id, jobs[2].id, jobs[3].id]
    with pytest.raises(ValueError, match="job kind"):
        _claim(db, "w", kinds=("train",))


def test_an_expired_lease_is_taken_over(db: SqlDatabase) -> None:
    tenant, model = _tenant_and_model(db)
    job = _job(db, "tune", tenant, model)
    assert _claim(db, "w1", 10, now=T0) is not None
    assert _claim(db, "w2", 10, now=T0 + timedelta(seconds=9)) is None  # w1's lease holds
    taken = _claim(db, "w2", 10, now=T0 + timedelta(seconds=11))
    assert taken is not None and taken.id == job.id and taken.worker_id == "w2" and taken.attempts == 2
    assert taken.started_at == T0  # the first start is kept
    with db.write_session() as s:
        # w1 lost it: it must stop
        assert not repo.heartbeat(s, kind="tune", id=job.id, worker_id="w1", lease_s=10)
        assert not repo.finish_job(s, kind="tune", id=job.id, worker_id="w1", state="succeeded")
        assert repo.heartbeat(s, kind="tune", id=job.id, worker_id="w2", lease_s=10)
        assert repo.finish_job(s, kind="tune", id=job.id, worker_id="w2", state="succeeded")


def test_a_job_whose_workers_keep_dying_fails(db: SqlDatabase) -> None:
    tenant, model = _tenant_and_model(db)
    job = _job(db, "compile", tenant, model)
    now = T0
    for attempt in range(1, repo.MAX_ATTEMPTS + 1):
        claimed = _claim(db, f"w{attempt}", 1, now=now)
        assert claimed is not None and claimed.attempts == attempt
        now += timedelta(seconds=2)
    assert _claim(db, "last", 1, now=now) is None
    with db.read_session() as s:
        failed = repo.get_job(s, "compile", tenant, job.id)
    assert failed is not None and failed.state == "failed" and "stopped responding" in (failed.error or "")


def test_release_puts_a_job_back_at_once(db: SqlDatabase) -> None:
    tenant, model = _tenant_and_model(db)
    job = _job(db, "tune", tenant, model)
    assert _claim(db, "w1") is not None
    with db.write_session() as s:
        assert not repo.release_job(s, kind="tune", id=job.id, worker_id="w2")
        assert repo.release_job(s, kind="tune", id=job.id, worker_id="w1")
    again = _claim(db, "w2")
    assert again is not None and again.id == job.id and again.worker_id == "w2"


# --- cancel -------------------------------------------------------------------------------------


def test_cancel_queued_running_and_finished_jobs(db: SqlDatabase) -> None:
    tenant, model = _tenant_and_model(db)
    globex, _ = _tenant_and_model(db, "globex")
    queued, running = _job(db, "tune", tenant, model), _job(db, "tune", tenant, model)
    with db.write_session() as s:
        # another tenant's job
        assert repo.request_cancel(s, kind="tune", tenant_id=globex, id=queued.id) is None
        assert repo.request_cancel(s, kind="tune", tenant_id=tenant, id="nope") is None
        cancelled = repo.request_cancel(s, kind="tune", tenant_id=tenant, id=queued.id)
    assert cancelled is not None and cancelled.state == "cancelled" and cancelled.finished_at is not None
    claimed = _claim(db, "w")
    assert claimed is not None and claimed.id == running.id  # the cancelled one is never claimed
    with db.write_session() as s:
        flagged = repo.request_cancel(s, kind="tune", tenant_id=tenant, id=running.id)
        assert flagged is not None and flagged.state == "running" and flagged.cancel_requested
        # the worker is told to stop
        assert not repo.heartbeat(s, kind="tune", id=running.id, worker_id="w", lease_s=30)
        assert repo.finish_job(s, kind="tune", id=running.id, worker_id="w", state="cancelled")
        done = repo.request_cancel(s, kind="tune", tenant_id=tenant, id=running.id)
    assert done is not None and done.state == "cancelled"


def test_an_abandoned_job_asked_to_cancel_ends_cancelled(db: SqlDatabase) -> None:
    tenant, model = _tenant_and_model(db)
    job = _job(db, "tune", tenant, model)
    assert _claim(db, "dead", 1, now=T0) is not None
    with db.write_session() as s:
        repo.request_cancel(s, kind="tune", tenant_id=tenant, id=job.id)
    assert _claim(db, "w", 1, now=T0 + timedelta(seconds=5)) is None
    with db.read_session() as s:
        got = repo.get_job(s, "tune", tenant, job.id)
    assert got is not None and got.state == "cancelled"


# --- many workers at once -----------------------------------------------------------------------


def test_concurrent_claims_take_each_job_exactly_once(db: SqlDatabase) -> None:
    tenant, model = _tenant_and_model(db)
    jobs = {_job(db, kind, tenant, model).id for kind in ("compile", "tune") * 12}
    workers = 4
    barrier = threading.Barrier(workers)
    taken: dict[str, list[str]] = {f"w{k}": [] for k in range(workers)}
    errors: list[BaseException] = []

    def work(worker: str) -> None:
        try:
            barrier.wait()
            while (job := _claim(db, worker)) is not None:
                taken[worker].append(job.id)
                with db.write_session() as s:
                    assert repo.finish_job(s, kind=job.kind, id=job.id, worker_id=worker, state="succeeded")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in taken]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    claimed = [j for ids in taken.values() for j in ids]
    assert sorted(claimed) == sorted(jobs)  # every job once, none twice
    with db.read_session() as s:
        counts = repo.count_jobs_by_state(s)
    assert counts[("compile", "succeeded")] == counts[("tune", "succeeded")] == 12
