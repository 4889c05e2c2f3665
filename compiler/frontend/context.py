"""What one ONNX node's converter sees: its inputs as graph values, its attributes, and `emit`.

`emit` infers the result type with the op's shape rule (errors name the ONNX node) and folds the
call into a Const when every argument is constant, so shape subgraphs disappear as they are built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from compiler.errors import CompilerError, ShapeError
from compiler.graph.interpret import fold
from compiler.graph.ir import Call, Const, Expr, attrs_of
from compiler.limits import DEFAULT_LIMITS, FOLD_ELEMENTS, Limits
from compiler.ops import registry
from compiler.tensor_type import TensorType


def _shortest(value: float) -> float:
    """A float32 attribute as the shortest decimal that rounds to it (1e-05, not 9.99999974e-06)."""
    return float(str(np.float32(value)))


def decode_attribute(attr: onnx.AttributeProto) -> Any:
    """ONNX attribute -> plain Python / numpy value (strings decoded, tensors as arrays)."""
    value = helper.get_attribute_value(attr)
    if attr.type == onnx.AttributeProto.FLOAT:
        return _shortest(value)
    if attr.type == onnx.AttributeProto.FLOATS:
        return [_shortest(v) for v in value]
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [v.decode() if isinstance(v, bytes) else v for v in value]
    return value


@dataclass
class Budget:
    """What converting one model may still allocate: every value's size is checked against the
    limits as its type is inferred, and constants folded so far count against the model's total."""

    limits: Limits = DEFAULT_LIMITS
    folded: int = 0
    unrolled: int = 0

    def check(self, t: TensorType) -> None:
        if any(d < 0 for d in t.shape):
            raise ShapeError(f"result would have negative dims {list(t.shape)}")
        if t.size > self.limits.tensor_elements:
            raise ShapeError(
                f"result would have {t.size} elements (shape {list(t.shape)}); "
                f"the limit is {self.limits.tensor_elements}"
            )

    def unroll(self, steps: int) -> bool:
        """Whether a recurrence of `steps` more steps may be unrolled (and count them if so)."""
        if self.unrolled + steps > self.limits.recurrence_steps:
            return False
        self.unrolled += steps
        return True

    def fold(self, elements: int) -> bool:
        """Whether a constant of `elements` may be folded now (and count it if so)."""
        if elements > FOLD_ELEMENTS or self.folded + elements > self.limits.total_constant_elements:
            return False
        self.folded += elements
        return True


@dataclass
class NodeContext:
    """One node being converted. `name` is the ONNX node name or f"{op_type}_{index}"."""

    node: onnx.NodeProto
    name: str
    opset: int
    inputs: list[Expr | None]  # None for an omitted optional input
    attrs: dict[str, Any]
    budget: Budget
    # the element types (ONNX TensorProto codes) the model declares for its constants, where temper
    # carries them in another dtype (8- and 16-bit integers in float32)
    declared: Mapping[str, int] = field(default_factory=dict)

    @property
    def op_type(self) -> str:
        return self.node.op_type

    def declared_type(self, i: int) -> int | None:
        """The ONNX element type the model gives constant input i (None: not a constant, or omitted)."""
        name = self.node.input[i] if i < len(self.node.input) else ""
        return self.declared.get(name) if name else None

    def error(self, message: str) -> ShapeError:
        return ShapeError(message, node=self.name, op=self.op_type)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def arg(self, i: int) -> Expr:
        """A required input."""
        v = self.inputs[i] if i < len(self.inputs) else None
        if v is None:
            raise self.error(f"input {i} is required")
        return v

    def optional(self, i: int) -> Expr | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def const(self, i: int, what: str) -> np.ndarray | None:
        """The value of input i, which must be a compile-time constant (None if omitted)."""
        v = self.optional(i)
        if v is None:
            return None
        if not isinstance(v, Const):
            raise self.error(f"{what} (input {i}) must be a constant known at compile time")
        return v.data

    def ints(self, i: int, what: str) -> list[int] | None:
        data = self.const(i, what)
        return None if data is None else [int(x) for x in data.reshape(-1)]

    def new_const(
        self, data: np.ndarray | np.generic | float | int, dtype: str | None = None, name: str = ""
    ) -> Const:
        arr = np.asarray(data, dtype=dtype)
        if arr.dtype == np.float16:  # float16 constants take part in float32 computation
            arr = arr.astype(np.float32)
        return Const(name or f"{self.name}.const", arr)

    def emit(self, op: str, args: Sequence[Expr], **attrs: Any) -> Expr:
        return emit(op, args, attrs, node=self.name, op_type=self.op_type, budget=self.budget)

    def full(self, shape: Sequence[int], fill: np.generic) -> Expr:
        """A constant of `shape` filled with `fill`; a large one is broadcast at run time instead."""
        t = TensorType(tuple(shape), np.asarray(fill).dtype.name)
        try:
            self.budget.check(t)
        except ShapeError as e:
            raise self.error(e.message) from None
        if self.budget.fold(t.size):
            return self.new_const(np.full(t.shape, fill), name=self.node.output[0])
        scalar = self.new_const(np.asarray(fill), name=f"{self.name}.value")
        return self.emit("expand", [scalar], shape=t.shape)


def emit(
    op: str, args: Sequence[Expr], attrs: dict[str, Any], *, node: str, op_type: str, budget: Budget
) -> Expr:
    """Build (or fold, when every argument is constant and the result is not too large) one graph
    op; errors name the ONNX node."""
    frozen = attrs_of(attrs)
    plain = dict(frozen)
    try:
        out_type = registry.get(op).infer([a.type for a in args], plain)
        budget.check(out_type)
        if args and all(isinstance(a, Const) for a in args) and budget.fold(out_type.size):
            return fold(op, args, plain, out_type, name=node)
    except CompilerError as e:
        raise type(e)(e.message, node=node, op=op_type) from None
    return Call(op, tuple(args), frozen, out_type, node)


@dataclass(frozen=True)
class ScanInfo:
    """What the up-front support check knows before any conversion: opset, which values are
    compile-time constants, declared/inferred ranks, which values something consumes, the
    declared/inferred element types (ONNX TensorProto codes), and each value's consumers' op types
    (a graph output counts as consumed by "")."""

    opset: int
    consts: frozenset[str]
    ranks: dict[str, int]
    used: frozenset[str]
    dtypes: dict[str, int] = field(default_factory=dict)
    consumers: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def rank(self, name: str) -> int | None:
        return self.ranks.get(name)

    def dtype(self, name: str) -> int | None:
        return self.dtypes.get(name)


Converter = Callable[[NodeContext], Sequence[Expr | None]]
Check = Callable[[onnx.NodeProto, dict[str, Any], ScanInfo], str | None]


@dataclass(frozen=True)
class OpConverter:
    """How one ONNX op type becomes graph ops; `check` returns why a node is unsupported (or None)."""

    convert: Converter
    check: Check | None = None
