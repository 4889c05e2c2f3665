"""The ONNX ops temper imports, generated from the frontend's own tables (`temper ops`).

Nothing here is written by hand, so the list cannot drift from the code. An op is listed because
`compiler.frontend.onnx.CONVERTERS` maps it to a converter. Its opsets are the model opsets the
frontend accepts (`SUPPORTED_OPSETS`) in which ONNX defines the op without deprecating it (the ONNX
checker refuses a deprecated one); a model outside `NATIVE_OPSETS` is converted to the nearest native
opset first. Its dtypes are those ONNX allows for the op's tensors that temper computes at run time
(`RUNTIME_DTYPES`). Its restriction comes from the converter's support check, which refuses some
nodes of the op before conversion: the check's docstring when it has one, else where the check lives.
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import onnx

from compiler.frontend.context import OpConverter
from compiler.frontend.convert_math import RUNTIME_DTYPES
from compiler.frontend.onnx import CONVERTERS, DEFAULT_DOMAINS, NATIVE_OPSETS, SUPPORTED_OPSETS

# what the table's rows do not say: how other opsets and other ops are handled
NOTES = (
    f"temper's converters implement opsets {NATIVE_OPSETS.start}–{NATIVE_OPSETS.stop - 1}; a model of "
    "another opset is converted to the nearest of them with onnx.version_converter first.",
    "Any other op of the default domain is accepted when all its inputs are compile-time constants "
    "(temper folds it with ONNX's reference evaluator), except the random ops and ops holding "
    "subgraphs (control flow).",
)


@dataclass(frozen=True, slots=True)
class OpSupport:
    """One ONNX op temper converts: the model opsets it is accepted in (inclusive), the dtypes its
    tensors may have, and what its support check refuses (None: no check)."""

    name: str
    domain: str
    min_opset: int
    max_opset: int
    dtypes: tuple[str, ...]
    restriction: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "dtypes": list(self.dtypes)}


def supported_ops() -> list[OpSupport]:
    """Every op of the frontend's converter table that some accepted opset defines, sorted by name."""
    ops = []
    for name, converter in CONVERTERS.items():
        opsets = [v for v in SUPPORTED_OPSETS if _schema(name, v) is not None]
        if opsets:
            schema = _schema(name, opsets[-1])
            assert schema is not None
            ops.append(
                OpSupport(
                    name, DEFAULT_DOMAINS[-1], opsets[0], opsets[-1], _dtypes(schema), _restriction(converter)
                )
            )
    return sorted(ops, key=lambda op: op.name)


def ops_table(ops: list[OpSupport]) -> str:
    """A markdown table of `ops`, followed by the NOTES."""
    rows = ["| op | domain | opsets | dtypes | restriction |", "|---|---|---|---|---|"]
    for op in ops:
        cells = [op.name, op.domain, f"{op.min_opset}–{op.max_opset}", ", ".join(op.dtypes), op.restriction]
        rows.append("| " + " | ".join((c or "").replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n\n" + "\n\n".join(NOTES) + "\n"


def _schema(name: str, opset: int) -> onnx.defs.OpSchema | None:
    """The op's schema in a model of `opset` of the default domain (None: undefined or deprecated)."""
    try:
        schema = onnx.defs.get_schema(name, opset, "")
    except onnx.defs.SchemaError:
        return None
    return None if schema.deprecated else schema


def _dtypes(schema: onnx.defs.OpSchema) -> tuple[str, ...]:
    """RUNTIME_DTYPES that ONNX allows for any input or output of the op, in RUNTIME_DTYPES' order."""
    constraints = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    allowed: set[str] = set()
    for formal in (*schema.inputs, *schema.outputs):
        allowed |= constraints.get(formal.type_str, {formal.type_str})
    return tuple(d for d in RUNTIME_DTYPES if _onnx_type(d) in allowed)


def _onnx_type(dtype: str) -> str:
    """'float32' -> 'tensor(float)', as ONNX schemas spell tensor types."""
    code = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return f"tensor({onnx.TensorProto.DataType.Name(code).lower()})"


def _restriction(converter: OpConverter) -> str | None:
    if converter.check is None:
        return None
    doc = inspect.getdoc(converter.check)
    if doc:
        return doc.splitlines()[0]
    module = converter.check.__module__.replace(".", "/")
    return f"some nodes refused ({module}.py::{converter.check.__name__})"
