"""/v1/compilations: compile jobs. The request is checked here; a worker does the compiling."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from compiler.errors import CompilerError
from compiler.pipeline import CompileOptions
from service.deps import PrincipalDep, ServicesDep
from service.errors import InvalidInputError
from service.jobparams import CompileParams
from service.routes.common import (
    compilation_out,
    errors,
    job_or_404,
    job_shapes,
    json_body,
    model_or_404,
    sandboxed,
)
from service.schemas import CompilationIn, CompilationOut, JobState
from service.summary import check_override_names
from storage import repos as repo
from storage.repos import ModelInfo
from tuner.apply import override_choice

router = APIRouter(prefix="/v1/compilations", tags=["compilations"], responses=errors(401, 404, 422))


def _check_overrides(services: ServicesDep, overrides: Mapping[str, str | dict[str, Any]]) -> None:
    """Every `record:ID` must name a trusted tuning record and every trace must parse (the one
    definition of an override, tuner.apply.override_choice; a server never reads a file an override
    names: the client sends the trace itself)."""
    for node, spec in overrides.items():
        try:
            override_choice(node, spec, services.db)
        except CompilerError as e:
            raise InvalidInputError(str(e), code="invalid_override") from None


def _check_override_names(
    services: ServicesDep, model: ModelInfo, body: CompilationIn, shapes: Mapping[str, list[int]]
) -> None:
    """Every override must name an ONNX node or a kernel of the model as this job compiles it: an
    OverrideError (422, with the closest names) now, not a job that silently ignores it."""
    if not body.overrides:
        return
    options = CompileOptions(
        target=body.target, opt_level=body.opt_level, shapes={k: tuple(v) for k, v in shapes.items()}
    )
    data = services.blobs.read_bytes(model.blob_key)
    sandboxed(services, check_override_names, data, options, list(body.overrides), what="the override check")


@router.post(
    "",
    status_code=202,
    summary="Request a compilation",
    responses=errors(400, 415),
    dependencies=[Depends(json_body)],
)
def create_compilation(body: CompilationIn, principal: PrincipalDep, services: ServicesDep) -> CompilationOut:
    model = model_or_404(services, principal, body.model_id)
    shapes = job_shapes(services, model, body.shapes, body.target, body.opt_level)
    _check_overrides(services, body.overrides)
    _check_override_names(services, model, body, shapes)
    params = CompileParams(
        shapes={name: tuple(dims) for name, dims in shapes.items()},
        target=body.target,
        opt_level=body.opt_level,
        use_tuned=body.use_tuned,
        overrides=dict(body.overrides),
    ).to_json()
    with services.db.write_session() as session:
        job = repo.create_job(
            session, kind="compile", tenant_id=principal.tenant_id, model_id=model.id, params=params
        )
    return compilation_out(job)


@router.get("", summary="List compilations")
def list_compilations(
    principal: PrincipalDep,
    services: ServicesDep,
    state: Annotated[JobState | None, Query(description="Only jobs in this state.")] = None,
) -> list[CompilationOut]:
    with services.db.read_session() as session:
        jobs = repo.list_jobs(session, "compile", principal.tenant_id, state=state)
    return [compilation_out(j) for j in jobs]


@router.get("/{compilation_id}", summary="One compilation (artifact_id once it succeeded)")
def get_compilation(compilation_id: str, principal: PrincipalDep, services: ServicesDep) -> CompilationOut:
    return compilation_out(job_or_404(services, principal, "compile", compilation_id))


@router.post("/{compilation_id}/cancel", status_code=202, summary="Cancel a compilation")
def cancel_compilation(compilation_id: str, principal: PrincipalDep, services: ServicesDep) -> CompilationOut:
    job_or_404(services, principal, "compile", compilation_id)
    with services.db.write_session() as session:
        job = repo.request_cancel(session, kind="compile", tenant_id=principal.tenant_id, id=compilation_id)
    return compilation_out(
        job if job is not None else job_or_404(services, principal, "compile", compilation_id)
    )
