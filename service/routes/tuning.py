"""/v1/tuning-jobs: submit, watch (progress per task, the best-so-far curve) and cancel tuning."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from service.deps import PrincipalDep, ServicesDep
from service.jobparams import TuneParams
from service.routes.common import errors, job_or_404, job_shapes, json_body, model_or_404, tuning_out
from service.schemas import JobState, TuningJobIn, TuningJobOut
from storage import repos as repo

router = APIRouter(prefix="/v1/tuning-jobs", tags=["tuning"], responses=errors(401, 404, 422))


@router.post(
    "",
    status_code=202,
    summary="Submit a tuning job",
    responses=errors(400, 415),
    dependencies=[Depends(json_body)],
)
def create_tuning_job(body: TuningJobIn, principal: PrincipalDep, services: ServicesDep) -> TuningJobOut:
    model = model_or_404(services, principal, body.model_id)
    shapes = job_shapes(services, model, body.shapes, body.target, body.opt_level)
    params = TuneParams(
        shapes={name: tuple(dims) for name, dims in shapes.items()},
        target=body.target,
        opt_level=body.opt_level,
        trials=body.trials,
        time_budget_s=body.time_budget_s,
        batch=body.batch,
        seed=body.seed,
    ).to_json()
    with services.db.write_session() as session:
        job = repo.create_job(
            session, kind="tune", tenant_id=principal.tenant_id, model_id=model.id, params=params
        )
    return tuning_out(job)


@router.get("", summary="List tuning jobs")
def list_tuning_jobs(
    principal: PrincipalDep,
    services: ServicesDep,
    state: Annotated[JobState | None, Query(description="Only jobs in this state.")] = None,
) -> list[TuningJobOut]:
    with services.db.read_session() as session:
        jobs = repo.list_jobs(session, "tune", principal.tenant_id, state=state)
    return [tuning_out(j) for j in jobs]


@router.get("/{job_id}", summary="One tuning job with its progress")
def get_tuning_job(job_id: str, principal: PrincipalDep, services: ServicesDep) -> TuningJobOut:
    return tuning_out(job_or_404(services, principal, "tune", job_id))


@router.post(
    "/{job_id}/cancel",
    status_code=202,
    summary="Cancel a tuning job (queued: at once; running: after the batch in flight)",
)
def cancel_tuning_job(job_id: str, principal: PrincipalDep, services: ServicesDep) -> TuningJobOut:
    job_or_404(services, principal, "tune", job_id)
    with services.db.write_session() as session:
        job = repo.request_cancel(session, kind="tune", tenant_id=principal.tenant_id, id=job_id)
    return tuning_out(job if job is not None else job_or_404(services, principal, "tune", job_id))
