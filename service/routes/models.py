"""/v1/models: upload ONNX models, list, inspect every pipeline stage, delete.

An upload is checked completely (size, content type, ONNX validity, supported ops, shapes) before
anything is written: a refused upload leaves no blob and no row.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import PurePath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Query, Request, Response, UploadFile
from fastapi.responses import PlainTextResponse
from pydantic import TypeAdapter, ValidationError

from compiler.pipeline import CompileOptions
from service.deps import PrincipalDep, ServicesDep
from service.errors import (
    InvalidInputError,
    NotFoundError,
    PayloadTooLargeError,
    UnsupportedMediaTypeError,
    describe_validation,
)
from service.routes.common import errors, is_id, model_or_404, model_out, sandboxed
from service.schemas import ModelOut, Name, Shapes, Stage, Target
from service.summary import explain_json, stage_text, summarize
from storage import repos as repo
from storage.repos import ModelInfo

router = APIRouter(prefix="/v1/models", tags=["models"], responses=errors(401, 404, 422))

# What an ONNX file may be labelled as (clients label unknown extensions octet-stream).
ONNX_MEDIA_TYPES = frozenset(
    {
        "application/octet-stream",
        "application/onnx",
        "application/x-onnx",
        "application/vnd.onnx",
        "application/protobuf",
        "application/x-protobuf",
        "application/vnd.google.protobuf",
    }
)
_SHAPES = TypeAdapter(Shapes)
_NAME = TypeAdapter(Name)


def parse_shapes(text: str | None, field: str = "shapes") -> dict[str, list[int]] | None:
    """A JSON `{"input": [dims]}` form/query field; 422 naming the problem."""
    if text is None or not text.strip():
        return None
    try:
        value = json.loads(text)
    except ValueError as e:
        raise InvalidInputError(f"{field}: not JSON ({e})", code="invalid_shapes") from None
    except RecursionError:
        raise InvalidInputError(f"{field}: JSON nested too deeply", code="invalid_shapes") from None
    try:
        return {k: list(v) for k, v in _SHAPES.validate_python(value).items()}
    except ValidationError as e:
        message = describe_validation(e.errors())
        raise InvalidInputError(
            f'{field}: {message} (expected {{"input": [dims]}})', code="invalid_shapes"
        ) from None


def _multipart(request: Request, _principal: PrincipalDep) -> None:
    """Uploads are multipart/form-data (checked after the key, so a stranger learns nothing)."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "multipart/form-data":
        raise UnsupportedMediaTypeError(
            f"upload the model as multipart/form-data with a 'file' field (got {media or 'no content type'})"
        )


@router.post(
    "",
    status_code=201,
    summary="Upload an ONNX model",
    dependencies=[Depends(_multipart)],
    responses=errors(400, 413, 415),
)
def upload_model(
    principal: PrincipalDep,
    services: ServicesDep,
    file: Annotated[UploadFile, File(description="The ONNX model file.")],
    name: Annotated[str | None, Form(description="A name (default: the file name).")] = None,
    shapes: Annotated[
        str | None, Form(description='Input shapes as JSON, e.g. {"x": [1, 3, 224, 224]}.')
    ] = None,
) -> ModelOut:
    """Check the model (parse, ops, shapes, tasks) and store it; nothing is stored when it fails."""
    limit = services.settings.max_upload_bytes
    media = (file.content_type or "application/octet-stream").split(";")[0].strip().lower()
    if media not in ONNX_MEDIA_TYPES:
        raise UnsupportedMediaTypeError(
            f"file has content type {media!r}; send the ONNX file as application/octet-stream"
        )
    if file.size is not None and file.size > limit:
        raise PayloadTooLargeError(f"model file is {file.size} bytes; the limit is {limit} bytes")
    data = file.file.read(limit + 1)
    if len(data) > limit:
        raise PayloadTooLargeError(f"model file is over the limit of {limit} bytes")
    if not data:
        raise InvalidInputError("the model file is empty", code="invalid_model")
    bound = parse_shapes(shapes) or {}
    label = name if name is not None else PurePath(file.filename or "model").stem or "model"
    try:
        label = _NAME.validate_python(label)
    except ValidationError as e:
        raise InvalidInputError(f"name: {describe_validation(e.errors())}") from None
    # the compiler's typed errors pass through; a model that needs more than the limits is a 422
    summary = sandboxed(
        services, summarize, data, bound, services.settings.target, what="the model's analysis"
    )
    key = services.blobs.put_bytes(data)
    with services.db.write_session() as session:
        info = repo.create_model(
            session,
            tenant_id=principal.tenant_id,
            name=label,
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            blob_key=key,
            summary=summary,
        )
    return model_out(info)


@router.get("", summary="List models")
def list_models(principal: PrincipalDep, services: ServicesDep) -> list[ModelOut]:
    with services.db.read_session() as session:
        return [model_out(m) for m in repo.list_models(session, principal.tenant_id)]


@router.get("/{model_id}", summary="One model and its summary")
def get_model(model_id: str, principal: PrincipalDep, services: ServicesDep) -> ModelOut:
    return model_out(model_or_404(services, principal, model_id))


@router.delete("/{model_id}", status_code=204, summary="Delete a model (its jobs and artifacts stay)")
def delete_model(model_id: str, principal: PrincipalDep, services: ServicesDep) -> Response:
    deleted = False
    if is_id(model_id):
        with services.db.write_session() as session:
            deleted = repo.delete_model(session, tenant_id=principal.tenant_id, id=model_id)
    if not deleted:
        raise NotFoundError.of("model", model_id)
    return Response(status_code=204)


def _stage_inputs(
    services: ServicesDep, info: ModelInfo, shapes: str | None, target: str, opt_level: int, use_tuned: bool
) -> tuple[bytes, CompileOptions, str | None]:
    """What the IR and explain endpoints compile: the model's bytes, the options (shapes default to
    the upload's) and the database whose records schedule it (None: default schedules)."""
    bound = parse_shapes(shapes)
    if bound is None:
        bound = dict((info.summary or {}).get("shapes") or {})
    options = CompileOptions(
        target=target, opt_level=opt_level, shapes={k: tuple(v) for k, v in bound.items()}
    )
    url = services.settings.database_url if use_tuned else None
    return services.blobs.read_bytes(info.blob_key), options, url


@router.get(
    "/{model_id}/ir",
    summary="The model's IR at one pipeline stage",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {}}, "description": "The stage's text."}},
)
def model_ir(
    model_id: str,
    principal: PrincipalDep,
    services: ServicesDep,
    stage: Annotated[Stage, Query(description="Which stage of the pipeline to print.")],
    kernel: Annotated[
        str | None, Query(max_length=255, description="Only this kernel (or the kernel of this node).")
    ] = None,
    shapes: Annotated[str | None, Query(description="Input shapes as JSON (default: the upload's).")] = None,
    target: Target = "host",
    opt_level: Annotated[int, Query(ge=0, le=3)] = 3,
    use_tuned: Annotated[bool, Query(description="Schedule kernels with the best tuning records.")] = False,
) -> PlainTextResponse:
    data, options, url = _stage_inputs(
        services, model_or_404(services, principal, model_id), shapes, target, opt_level, use_tuned
    )
    text = sandboxed(services, stage_text, data, stage, options, kernel, url, what=f"the {stage} stage")
    return PlainTextResponse(text)


@router.get("/{model_id}/explain", summary="Why each kernel is what it is (as `temper explain`)")
def model_explain(
    model_id: str,
    principal: PrincipalDep,
    services: ServicesDep,
    node: Annotated[
        str | None, Query(max_length=255, description="Only the kernel running this ONNX node (or kernel).")
    ] = None,
    shapes: Annotated[str | None, Query(description="Input shapes as JSON (default: the upload's).")] = None,
    target: Target = "host",
    opt_level: Annotated[int, Query(ge=0, le=3)] = 3,
    use_tuned: Annotated[bool, Query(description="Schedule kernels with the best tuning records.")] = True,
    profile: Annotated[
        bool, Query(description="Compile, run on random inputs and time each kernel.")
    ] = False,
) -> dict[str, Any]:
    """For every kernel: the ONNX nodes it fused, the passes that rewrote them, the implementations
    available on the target and the one chosen with the rules' reasons, its schedule rule (and any
    fallback), the schedule's source (default, tuning record with its times, override), its
    decisions, FLOPs and, with `profile`, its measured time."""
    data, options, url = _stage_inputs(
        services, model_or_404(services, principal, model_id), shapes, target, opt_level, use_tuned
    )
    result: dict[str, Any] = sandboxed(
        services, explain_json, data, options, node, url, profile, what="explain"
    )
    return result
