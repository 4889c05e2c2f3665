"""What an ONNX file may hold, checked on the raw protobuf before anything reads its tensors.

A model is untrusted input. A tensor anywhere in it (an initializer, a Constant's attribute, a sparse
tensor, an attribute of any node, a tensor inside an If/Loop/Scan body or a function) may claim its
bytes live in an "external data" file: reading that would let the file make the server read its own
disk. It may also declare dims that are negative or astronomically large, carry fewer bytes than its
dims promise, name a dtype that does not exist, or hold strings that are not UTF-8. All of that is
refused here, in one iterative walk over every message of the file (no recursion, whatever the
nesting), with the same message whether or not a named file exists.

External data is accepted only through `resolve_external_data`, which reads it from files inside
one directory the caller names (the CLI: the model file's own directory), never outside it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from compiler.errors import ModelError, ShapeError
from compiler.limits import DEFAULT_LIMITS, Limits

# dtype -> (field holding its values, entries per element) when not in raw_data
_TYPED_FIELDS: dict[int, tuple[str, int]] = {
    onnx.TensorProto.FLOAT: ("float_data", 1),
    onnx.TensorProto.DOUBLE: ("double_data", 1),
    onnx.TensorProto.COMPLEX64: ("float_data", 2),
    onnx.TensorProto.COMPLEX128: ("double_data", 2),
    onnx.TensorProto.INT64: ("int64_data", 1),
    onnx.TensorProto.UINT32: ("uint64_data", 1),
    onnx.TensorProto.UINT64: ("uint64_data", 1),
    onnx.TensorProto.STRING: ("string_data", 1),
}
_SUB_BYTE_BITS = {"uint4": 4, "int4": 4, "float4_e2m1fn": 4, "uint2": 2, "int2": 2}
_KNOWN_DTYPES = frozenset(v for v in onnx.TensorProto.DataType.values() if v != onnx.TensorProto.UNDEFINED)
EXTERNAL_DATA_REFUSED = (
    "keeps its data in an external file; temper reads no file that a model names "
    "(save the model with its data embedded)"
)


def dtype_name(elem_type: int) -> str:
    """The ONNX name of a dtype number, or the number itself when ONNX defines no such dtype."""
    if elem_type in _KNOWN_DTYPES:
        name: str = onnx.TensorProto.DataType.Name(elem_type)  # protobuf's enum wrapper is untyped here
        return name
    return f"{elem_type} (not an ONNX dtype)"


def _itemsize_bits(data_type: int) -> int | None:
    try:
        np_dtype = onnx.helper.tensor_dtype_to_np_dtype(data_type)
    except (KeyError, ValueError, TypeError):
        return None
    return _SUB_BYTE_BITS.get(np_dtype.name, np_dtype.itemsize * 8)


def declared_bytes(t: onnx.TensorProto) -> int:
    """The bytes a tensor's dims and dtype promise (0 for strings and unknown dtypes), read without
    touching its data: asking protobuf for the data or the message's size copies or walks it all."""
    bits = _itemsize_bits(t.data_type) if t.data_type != onnx.TensorProto.STRING else None
    return 0 if bits is None else (math.prod(t.dims) * bits + 7) // 8


class _Walk:
    """One pass over every message of a model; raises at the first thing it cannot accept."""

    def __init__(self, limits: Limits, allow_external: bool) -> None:
        self.limits = limits
        self.allow_external = allow_external
        self.nodes = 0
        self.constant_elements = 0
        self.external: list[onnx.TensorProto] = []

    def run(self, model: onnx.ModelProto) -> None:
        # (message, where it is, how many graphs enclose it)
        stack: list[tuple[Message, str, int]] = [(model, "model", 0)]
        while stack:
            message, where, depth = stack.pop()
            if isinstance(message, onnx.GraphProto):
                depth += 1
                if depth > self.limits.graph_depth:
                    raise ModelError(f"{where}: graphs nested {depth} deep (limit {self.limits.graph_depth})")
            elif isinstance(message, onnx.NodeProto):
                self.nodes += 1
                if self.nodes > self.limits.nodes:
                    raise ModelError(f"model has more than {self.limits.nodes} nodes (the limit)")
            elif isinstance(message, onnx.TensorProto):
                self._tensor(message, where)
            elif isinstance(message, onnx.TypeProto.Tensor | onnx.TypeProto.SparseTensor) and (
                message.elem_type not in _KNOWN_DTYPES and message.elem_type != onnx.TensorProto.UNDEFINED
            ):
                raise ModelError(f"{where}: declares dtype {dtype_name(message.elem_type)}")
            elif isinstance(message, onnx.SparseTensorProto):
                self._elements(list(message.dims), f"{where}: a sparse tensor", constant=True)
            for field, value in message.ListFields():
                if field.type == FieldDescriptor.TYPE_MESSAGE:
                    children = list(value) if _repeated(field) else [value]
                    stack.extend(
                        (child, _where(where, field.name, k, child), depth)
                        for k, child in reversed(list(enumerate(children)))
                    )
                elif field.type == FieldDescriptor.TYPE_STRING:
                    for text in value if _repeated(field) else [value]:
                        if not isinstance(text, str):
                            raise ModelError(f"{where}: field {field.name!r} is not valid UTF-8 text")

    def _tensor(self, t: onnx.TensorProto, where: str) -> None:
        what = f"{where}: tensor {t.name!r}" if t.name else f"{where}: a tensor"
        if t.data_location == onnx.TensorProto.EXTERNAL or len(t.external_data):
            if not self.allow_external:
                raise ModelError(f"{what} {EXTERNAL_DATA_REFUSED}")
            self.external.append(t)
        if t.data_type not in _KNOWN_DTYPES:
            raise ModelError(f"{what} has dtype {dtype_name(t.data_type)}")
        if t.HasField("segment"):
            raise ModelError(f"{what} is stored in segments, which temper does not read")
        numel = self._elements(list(t.dims), what, constant=True)
        if t.data_location == onnx.TensorProto.EXTERNAL:
            return  # its size is checked when its data is read (resolve_external_data)
        _check_data_size(t, numel, what)

    def _elements(self, dims: list[int], what: str, *, constant: bool) -> int:
        if any(d < 0 for d in dims):
            raise ShapeError(f"{what} has negative dims {dims}")
        numel = math.prod(dims)
        if numel > self.limits.tensor_elements:
            raise ShapeError(
                f"{what} has {numel} elements (dims {dims}); the limit is {self.limits.tensor_elements}"
            )
        if constant:
            self.constant_elements += numel
            if self.constant_elements > self.limits.total_constant_elements:
                raise ShapeError(
                    f"the model's tensors hold more than {self.limits.total_constant_elements} elements "
                    f"in all (the limit), reached at {what}"
                )
        return numel


def _where(parent: str, field: str, index: int, child: Message) -> str:
    """A readable location: graph 'main' > node 'Conv_3' > attribute 'value'."""
    if isinstance(child, onnx.GraphProto):
        label = f"graph {child.name!r}"
    elif isinstance(child, onnx.NodeProto):
        label = f"node {child.name or f'{child.op_type}_{index}'!r}"
    elif isinstance(child, onnx.AttributeProto):
        label = f"attribute {child.name!r}"
    elif isinstance(child, onnx.ValueInfoProto):
        label = f"{field} {child.name!r}"
    elif isinstance(child, onnx.FunctionProto):
        label = f"function {child.name!r}"
    elif isinstance(child, onnx.TensorProto) and field in ("values", "indices"):
        label = f"sparse {field}"
    else:
        return parent
    return label if parent == "model" else f"{parent} > {label}"


def _repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _check_data_size(t: onnx.TensorProto, numel: int, what: str) -> None:
    """The tensor's stored data must be exactly what its dims and dtype promise."""
    dims = list(t.dims)
    if t.data_type == onnx.TensorProto.STRING:
        if len(t.string_data) != numel:
            raise ShapeError(f"{what} has dims {dims} but holds {len(t.string_data)} strings")
        return
    bits = _itemsize_bits(t.data_type)
    if t.HasField("raw_data"):
        if bits is None:
            raise ModelError(f"{what} has dtype {dtype_name(t.data_type)} with raw data temper cannot size")
        expected = (numel * bits + 7) // 8
        if len(t.raw_data) != expected:
            raise ShapeError(
                f"{what} has dims {dims} and dtype {dtype_name(t.data_type)} ({expected} bytes) "
                f"but holds {len(t.raw_data)} bytes"
            )
        return
    field, per_element = _TYPED_FIELDS.get(t.data_type, ("int32_data", 1))
    held = len(getattr(t, field))
    if bits is not None and bits < 8:
        expected = (numel * bits + 31) // 32 if held != numel else numel  # packed or one per entry
    else:
        expected = numel * per_element
    if held != expected:
        raise ShapeError(
            f"{what} has dims {dims} and dtype {dtype_name(t.data_type)} but holds {held} values in {field}"
        )


def check_model(
    model: onnx.ModelProto, limits: Limits = DEFAULT_LIMITS, *, allow_external: bool = False
) -> list[onnx.TensorProto]:
    """Refuse what no model may hold (see the module docstring); returns the tensors whose data is
    external (always none unless `allow_external`)."""
    walk = _Walk(limits, allow_external)
    walk.run(model)
    return walk.external


# ---- external data, inside one directory only ------------------------------------------------------


def _external_entries(t: onnx.TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def _inside(base: Path, location: str, what: str) -> Path:
    """The file `location` names, which must lie inside `base` once links are resolved."""
    if not location or os.path.isabs(location) or "\\" in location or ":" in location:
        raise ModelError(
            f"{what}: external data location {location!r} is not a relative path inside the model's directory"
        )
    root = base.resolve()
    path = (root / location).resolve()
    if root not in path.parents:
        raise ModelError(f"{what}: external data location {location!r} is outside the model's directory")
    return path


def resolve_external_data(tensors: list[onnx.TensorProto], base: Path) -> None:
    """Read each external tensor's bytes from its file under `base` into the tensor (raw_data), checking
    that the file lies inside `base`, that offset and length fall inside the file and that the length
    is what the tensor's dims promise."""
    for t in tensors:
        what = f"tensor {t.name!r}"
        entries = _external_entries(t)
        path = _inside(base, entries.get("location", ""), what)
        try:
            offset = int(entries.get("offset", "0"))
            length = int(entries["length"]) if "length" in entries else None
        except ValueError:
            raise ModelError(f"{what}: external data offset/length are not integers") from None
        numel = math.prod(t.dims)
        bits = _itemsize_bits(t.data_type)
        if bits is None:
            raise ModelError(f"{what} has dtype {dtype_name(t.data_type)}, which cannot be stored externally")
        expected = (numel * bits + 7) // 8
        if length is None:
            length = expected
        if offset < 0 or length != expected:
            raise ShapeError(
                f"{what}: external data of {length} bytes at offset {offset}; its dims need {expected}"
            )
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if offset + length > size:
                    raise ModelError(f"{what}: external data runs past the end of {entries['location']!r}")
                f.seek(offset)
                data = f.read(length)
        except OSError as exc:
            raise ModelError(
                f"{what}: cannot read external data {entries['location']!r}: {exc.strerror}"
            ) from None
        t.raw_data = data
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT
