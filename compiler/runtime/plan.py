"""The execution plan: a typed, fully checked view of plan.json.

Every consistency rule of the format lives here, so the writer refuses to package a plan the
loader would reject, and the loader never indexes past a buffer it was handed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np

from compiler.runtime.errors import ArtifactError

PARAM_ALIGN = 64
BUFFER_KINDS = ("input", "output", "param", "workspace", "alias")

# dtype names the format knows; all little-endian (the format stores raw little-endian bytes).
DTYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(name).newbyteorder("<")
    for name in (
        "float16",
        "float32",
        "float64",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "bool",
    )
}

BufferId = int | str


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One input or output of a compiled model, as a user sees it."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class Buffer:
    """One planned buffer; `offset` is into params.bin (param), the workspace, or the aliased buffer."""

    id: BufferId
    shape: tuple[int, ...]
    dtype: str
    kind: str
    name: str | None = None
    offset: int = 0
    alias_of: BufferId | None = None

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPES[self.dtype].itemsize


@dataclass(frozen=True, slots=True)
class Step:
    """One kernel call: the symbol and the buffer ids passed, in the kernel's parameter order."""

    kernel: str
    args: tuple[BufferId, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    """The static execution plan; `inputs` / `outputs` keep plan.json's name -> buffer id order."""

    buffers: Mapping[BufferId, Buffer]
    workspace_bytes: int
    inputs: tuple[tuple[str, BufferId], ...]
    outputs: tuple[tuple[str, BufferId], ...]
    steps: tuple[Step, ...]


def _fail(message: str) -> ArtifactError:
    return ArtifactError(f"plan.json: {message}")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _known(buf_id: object, buffers: Mapping[BufferId, Buffer]) -> TypeGuard[BufferId]:
    return (_is_int(buf_id) or isinstance(buf_id, str)) and buf_id in buffers


def _shape(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list | tuple) or not all(_is_int(d) and d >= 0 for d in value):
        raise _fail(f"{where} has shape {value!r}; expected a list of non-negative integers")
    return tuple(value)


def _dtype(value: Any, where: str) -> str:
    if value not in DTYPES:
        raise _fail(f"{where} has dtype {value!r}; supported: {', '.join(DTYPES)}")
    return str(value)


def _buffer(raw: Any, index: int) -> Buffer:
    if not isinstance(raw, dict):
        raise _fail(f"buffer #{index} is not an object")
    buf_id = raw.get("id")
    if not (_is_int(buf_id) or isinstance(buf_id, str)):
        raise _fail(f"buffer #{index} has id {buf_id!r}; expected an integer or a string")
    where = f"buffer {buf_id!r}"
    kind = raw.get("kind")
    if kind not in BUFFER_KINDS:
        raise _fail(f"{where} has kind {kind!r}; expected one of {', '.join(BUFFER_KINDS)}")
    name = raw.get("name")
    if name is not None and not isinstance(name, str):
        raise _fail(f"{where} has a non-string name {name!r}")
    offset = raw.get("offset", 0)
    if kind in ("param", "workspace") and "offset" not in raw:
        raise _fail(f"{where} of kind {kind} needs an offset")
    if not _is_int(offset) or offset < 0:
        raise _fail(f"{where} has offset {offset!r}; expected a non-negative integer")
    alias_of = raw.get("alias_of")
    if kind == "alias" and alias_of is None:
        raise _fail(f"{where} of kind alias needs alias_of")
    return Buffer(
        id=buf_id,
        shape=_shape(raw.get("shape"), where),
        dtype=_dtype(raw.get("dtype"), where),
        kind=kind,
        name=name,
        offset=offset,
        alias_of=alias_of if kind == "alias" else None,
    )


def _check_placement(buffers: Mapping[BufferId, Buffer], workspace_bytes: int, params_size: int) -> None:
    """Every buffer fits where it lives; aliases end at a real buffer without cycles."""
    for buf in buffers.values():
        where = f"buffer {buf.id!r}"
        if buf.kind == "param":
            if buf.offset % PARAM_ALIGN:
                raise _fail(f"{where} (param) offset {buf.offset} is not {PARAM_ALIGN}-byte aligned")
            if buf.offset + buf.nbytes > params_size:
                raise _fail(
                    f"{where} (param) needs bytes {buf.offset}..{buf.offset + buf.nbytes} "
                    f"but params.bin holds {params_size}"
                )
        elif buf.kind == "workspace" and buf.offset + buf.nbytes > workspace_bytes:
            raise _fail(
                f"{where} (workspace) needs bytes {buf.offset}..{buf.offset + buf.nbytes} "
                f"but workspace_bytes is {workspace_bytes}"
            )
        elif buf.kind == "alias":
            seen = {buf.id}
            target_id = buf.alias_of
            while True:
                if not _known(target_id, buffers):
                    raise _fail(f"{where} is an alias of unknown buffer {target_id!r}")
                target = buffers[target_id]
                if target.kind != "alias":
                    break
                if target.id in seen:
                    raise _fail(f"{where} is part of an alias cycle")
                seen.add(target.id)
                target_id = target.alias_of
            assert buf.alias_of is not None  # the loop above found it among the buffers
            direct = buffers[buf.alias_of]
            if buf.offset + buf.nbytes > direct.nbytes:
                raise _fail(
                    f"{where} (alias) needs bytes {buf.offset}..{buf.offset + buf.nbytes} "
                    f"of buffer {direct.id!r}, which has {direct.nbytes}"
                )


def _named(raw: Any, key: str, buffers: Mapping[BufferId, Buffer]) -> tuple[tuple[str, BufferId], ...]:
    if not isinstance(raw, dict):
        raise _fail(f"{key} must map names to buffer ids")
    for name, buf_id in raw.items():
        if not _known(buf_id, buffers):
            raise _fail(f"{key[:-1]} {name!r} refers to unknown buffer {buf_id!r}")
    return tuple(raw.items())


def parse_plan(raw: Any, params_size: int) -> Plan:
    """Check a decoded plan.json against the format and the size of params.bin; return it typed."""
    if not isinstance(raw, dict):
        raise _fail("the plan is not a JSON object")
    raw_buffers = raw.get("buffers")
    if not isinstance(raw_buffers, list):
        raise _fail("buffers must be a list")
    buffers: dict[BufferId, Buffer] = {}
    for index, item in enumerate(raw_buffers):
        buf = _buffer(item, index)
        if buf.id in buffers:
            raise _fail(f"buffer id {buf.id!r} is used twice")
        buffers[buf.id] = buf
    workspace_bytes = raw.get("workspace_bytes", 0)
    if not _is_int(workspace_bytes) or workspace_bytes < 0:
        raise _fail(f"workspace_bytes is {workspace_bytes!r}; expected a non-negative integer")
    _check_placement(buffers, workspace_bytes, params_size)

    inputs = _named(raw.get("inputs"), "inputs", buffers)
    for name, buf_id in inputs:
        if buffers[buf_id].kind != "input":
            raise _fail(f"input {name!r} maps to buffer {buf_id!r} of kind {buffers[buf_id].kind}")
    input_ids = [buf_id for _, buf_id in inputs]
    for buf in buffers.values():
        if buf.kind == "input" and input_ids.count(buf.id) != 1:
            raise _fail(f"input buffer {buf.id!r} must be named exactly once in inputs")
    outputs = _named(raw.get("outputs"), "outputs", buffers)

    raw_steps = raw.get("steps")
    if not isinstance(raw_steps, list):
        raise _fail("steps must be a list")
    steps = []
    for index, item in enumerate(raw_steps):
        if not isinstance(item, dict) or not isinstance(item.get("kernel"), str) or not item["kernel"]:
            raise _fail(f"step {index} needs a kernel symbol")
        args = item.get("args")
        if not isinstance(args, list | tuple):
            raise _fail(f"step {index} ({item['kernel']}) needs a list of buffer ids as args")
        for buf_id in args:
            if not _known(buf_id, buffers):
                raise _fail(f"step {index} ({item['kernel']}) passes unknown buffer {buf_id!r}")
        steps.append(Step(kernel=item["kernel"], args=tuple(args)))
    return Plan(buffers, workspace_bytes, inputs, outputs, tuple(steps))


def _specs(manifest: Mapping[str, Any], key: str, plan: Plan) -> tuple[TensorSpec, ...]:
    """The manifest's list of inputs or outputs, checked against the plan's buffers."""
    entries = manifest.get(key)
    if not isinstance(entries, list):
        raise ArtifactError(f"manifest.json: {key} must be a list")
    named = dict(plan.inputs if key == "inputs" else plan.outputs)
    specs = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ArtifactError(f"manifest.json: every entry of {key} needs a name")
        name = entry["name"]
        if name not in named:
            raise ArtifactError(
                f"manifest.json lists {key[:-1]} {name!r} but plan.json has no such {key[:-1]}"
            )
        buf = plan.buffers[named[name]]
        shape = tuple(entry.get("shape") or ())
        if shape != buf.shape or entry.get("dtype") != buf.dtype:
            raise ArtifactError(
                f"manifest.json says {key[:-1]} {name!r} is {entry.get('dtype')}{list(shape)} "
                f"but plan.json buffer {buf.id!r} is {buf.dtype}{list(buf.shape)}"
            )
        specs.append(TensorSpec(name=name, shape=buf.shape, dtype=buf.dtype))
    missing = set(named) - {s.name for s in specs}
    if missing or len(specs) != len(named):
        raise ArtifactError(
            f"manifest.json {key} do not match plan.json (missing or repeated: {sorted(missing)})"
        )
    return tuple(specs)


def signature(
    manifest: Mapping[str, Any], plan: Plan
) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """Inputs and outputs in manifest order, after checking manifest and plan agree (and on kernels)."""
    kernels = manifest.get("kernels")
    if not isinstance(kernels, list) or not all(isinstance(k, dict) for k in kernels):
        raise ArtifactError("manifest.json: kernels must be a list of objects")
    symbols = {k.get("symbol") for k in kernels}
    for index, step in enumerate(plan.steps):
        if step.kernel not in symbols:
            raise ArtifactError(
                f"plan.json step {index} calls {step.kernel!r}, which manifest.json does not list"
            )
    return _specs(manifest, "inputs", plan), _specs(manifest, "outputs", plan)
