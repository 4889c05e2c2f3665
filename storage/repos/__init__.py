"""The service's queries, one module per resource: tenants, API keys, models, jobs, artifacts.

Plain functions over a SQLAlchemy Session that return frozen dataclasses, never ORM objects, so
callers (HTTP routes, workers) cannot trip over lazy loading or expired rows. Nothing here commits:
the caller's session block is the transaction. Functions that write must be given a write session
(`SqlDatabase.write_session()`): on SQLite its transaction holds the write lock from BEGIN
(IMMEDIATE), so a read-then-write here never fails half-way because another process wrote first.
Write functions take the session positionally and everything else by keyword.

Callers use the package as one namespace: `from storage import repos as repo`, then
`repo.create_model(s, tenant_id=..., ...)`.
"""

from storage.models import JobState
from storage.repos.artifacts import ArtifactInfo, create_artifact, get_artifact
from storage.repos.common import NotWriteSessionError
from storage.repos.jobs import (
    JOB_KINDS,
    MAX_ATTEMPTS,
    TERMINAL_STATES,
    JobInfo,
    JobKind,
    UnknownModelError,
    claim_job,
    count_jobs_by_state,
    create_job,
    finish_job,
    get_job,
    get_job_for_worker,
    heartbeat,
    list_jobs,
    release_job,
    request_cancel,
    update_progress,
)
from storage.repos.keys import (
    KEY_PREFIX,
    ApiKeyInfo,
    Principal,
    authenticate,
    create_api_key,
    hash_key,
    list_api_keys,
    revoke_api_key,
)
from storage.repos.models import ModelInfo, create_model, delete_model, get_model, list_models
from storage.repos.tenants import Tenant, TenantExistsError, create_tenant, get_or_create_tenant, get_tenant

__all__ = [
    "JOB_KINDS",
    "KEY_PREFIX",
    "MAX_ATTEMPTS",
    "TERMINAL_STATES",
    "ApiKeyInfo",
    "ArtifactInfo",
    "JobInfo",
    "JobKind",
    "JobState",
    "ModelInfo",
    "NotWriteSessionError",
    "Principal",
    "Tenant",
    "TenantExistsError",
    "UnknownModelError",
    "authenticate",
    "claim_job",
    "count_jobs_by_state",
    "create_api_key",
    "create_artifact",
    "create_job",
    "create_model",
    "create_tenant",
    "delete_model",
    "finish_job",
    "get_artifact",
    "get_job",
    "get_job_for_worker",
    "get_model",
    "get_or_create_tenant",
    "get_tenant",
    "hash_key",
    "heartbeat",
    "list_api_keys",
    "list_jobs",
    "list_models",
    "release_job",
    "request_cancel",
    "revoke_api_key",
    "update_progress",
]
