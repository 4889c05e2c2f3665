"""What an uploaded model is, computed once at upload: inputs/outputs, op counts, tuning tasks; and
the text of its pipeline stages on request.

Computing it runs the compiler's frontend and task extraction, so it is also the upload's
validation: a malformed file, an unsupported op or a bad shape raises the compiler's typed error
before anything is stored. A model with dynamic input dims and no shapes bound is still accepted
(the frontend's support scan runs first); its unbound inputs are listed and it has no tasks yet.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import onnx

from compiler.errors import ShapeError
from compiler.frontend.guard import dtype_name
from compiler.frontend.onnx import declared_dims, load_onnx, parse_model
from compiler.pipeline import CompileOptions
from tuner.task import extract_tasks

_UNBOUND_MARKERS = ("is not bound", "has an unknown rank")  # the frontend's words for unbound dims


def _dims(vi: onnx.ValueInfoProto) -> list[int | str]:
    return declared_dims(vi) or []


def _dtype(vi: onnx.ValueInfoProto) -> str:
    elem = vi.type.tensor_type.elem_type
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem).name
    except (KeyError, ValueError, TypeError):
        return dtype_name(elem).lower() if elem else "unknown"


def _tensors(values: Sequence[onnx.ValueInfoProto], skip: set[str]) -> list[dict[str, Any]]:
    return [{"name": v.name, "shape": _dims(v), "dtype": _dtype(v)} for v in values if v.name not in skip]


def unbound_inputs(proto: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> list[str]:
    """Graph inputs with dynamic (or unknown) dims that `shapes` does not bind."""
    inits = {t.name for t in proto.graph.initializer}
    out = []
    for vi in proto.graph.input:
        if vi.name in inits or vi.name in shapes:
            continue
        declared = declared_dims(vi)
        if declared is None or any(isinstance(d, str) for d in declared):
            out.append(vi.name)
    return out


def summarize(data: bytes, shapes: Mapping[str, Sequence[int]], target: str = "host") -> dict[str, Any]:
    """The summary stored with the model (the JSON of schemas.ModelOut minus the row's columns)."""
    proto = parse_model(data)
    bound = {k: tuple(int(d) for d in v) for k, v in shapes.items()}
    unbound = unbound_inputs(proto, bound)
    tasks: list[dict[str, Any]] = []
    if unbound:
        try:  # validates the file and its ops; raises a ShapeError of its own for bad bindings
            load_onnx(data, bound)
        except ShapeError as e:
            if not any(marker in str(e) for marker in _UNBOUND_MARKERS):
                raise
    else:
        options = CompileOptions(target=target, shapes=bound)
        tasks = [
            {"name": t.name, "key": t.key, "weight": t.weight, "flops": t.flops}
            for t in extract_tasks(data, options)
        ]
    inits = {t.name for t in proto.graph.initializer}
    return {
        "inputs": _tensors(proto.graph.input, inits),
        "outputs": _tensors(proto.graph.output, set()),
        "op_counts": dict(sorted(Counter(n.op_type for n in proto.graph.node).items())),
        "shapes": {k: list(v) for k, v in bound.items()},
        "unbound": unbound,
        "tasks": tasks,
        "flops": sum(t["flops"] * t["weight"] for t in tasks),
    }


def stage_text(
    data: bytes, stage: str, options: CompileOptions, kernel: str | None, database_url: str | None
) -> str:
    """One pipeline stage of a model as text (the IR endpoint), scheduled with the best records of
    `database_url` when given. A module-level function: the API runs it in a sandboxed child."""
    from compiler.pipeline import inspect_model
    from storage import tuned_schedules

    with tuned_schedules(database_url) as source:
        return inspect_model(data, stage, options, kernel=kernel, schedules=source)


def explain_json(
    data: bytes,
    options: CompileOptions,
    node: str | None,
    database_url: str | None,
    profile: bool = False,
) -> dict[str, Any]:
    """`temper explain` for an uploaded model, as JSON, scheduled with the best records of
    `database_url` when given (and each kernel timed when `profile`). Run in a sandboxed child."""
    from compiler.explain import explain_model, profile_kernels
    from storage import tuned_schedules

    with tuned_schedules(database_url) as source:
        timed = profile_kernels(data, options, source) if profile else None
        return explain_model(data, options, source, node=node, profile=timed).to_json()


def check_override_names(data: bytes, options: CompileOptions, names: list[str]) -> None:
    """OverrideError (with the closest names) when an override names no node and no kernel of the
    model as `options` compile it. Run in a sandboxed child, as every use of the frontend is."""
    from compiler.pipeline import build_frontier, match_names

    match_names(build_frontier(data, options), names)
