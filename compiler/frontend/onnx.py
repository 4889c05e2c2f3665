"""ONNX -> graph IR.

Order of work (each step fails with one typed error that says everything it knows):
parse -> opset -> onnx.checker -> strict ONNX shape inference (its verdict waits for the next step)
-> support scan (EVERY unsupported node in one UnsupportedOpError) -> bind dynamic input dims (EVERY
unbound dim in one ShapeError) -> convert node by node, folding whatever is constant.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper, numpy_helper, version_converter

from compiler.errors import CompilerError, ModelError, ShapeError, UnsupportedOpError
from compiler.frontend import (
    convert_attention,
    convert_einsum,
    convert_math,
    convert_nn,
    convert_quant,
    convert_recurrent,
    convert_reduce,
    convert_signal,
    convert_tensor,
    convert_transformer,
    guard,
)
from compiler.frontend.context import Budget, NodeContext, OpConverter, ScanInfo, decode_attribute, emit
from compiler.frontend.convert_math import COMPUTE_DTYPE, RUNTIME_DTYPES, onnx_dtype_name
from compiler.graph.ir import Const, Expr, Graph, Var
from compiler.limits import DEFAULT_LIMITS, FOLD_ELEMENTS, Limits
from compiler.tensor_type import DTYPES, TensorType

# The opsets temper's converters are written for; a model of another opset of the default domain
# is converted to the nearest of them first (onnx.version_converter), keeping its node names.
# From 22 to 28 the ops temper converts changed only their type lists, but for what the converters
# read themselves: Attention (new in 23), SpaceToDepth's mode (28), Cast's round_mode (float8 only).
NATIVE_OPSETS = range(13, 29)
SUPPORTED_OPSETS = range(7, onnx.defs.onnx_opset_version() + 1)
DEFAULT_DOMAINS = ("", "ai.onnx")
# The whole mapping ONNX op type -> converter, one table per family.
CONVERTERS: dict[str, OpConverter] = {
    **convert_math.CONVERTERS,
    **convert_nn.CONVERTERS,
    **convert_quant.CONVERTERS,
    **convert_reduce.CONVERTERS,
    **convert_tensor.CONVERTERS,
    **convert_einsum.CONVERTERS,
    **convert_attention.CONVERTERS,
    **convert_transformer.CONVERTERS,
    **convert_recurrent.CONVERTERS,
    **convert_signal.CONVERTERS,
}
# Ops never folded even when their inputs are constant.
_NEVER_FOLD = {
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
}
# Ops whose outputs are compile-time constants whatever their inputs (shapes are static).
_ALWAYS_CONST = {"Constant", "Shape", "Size"}


@dataclass(frozen=True)
class ImportedModel:
    graph: Graph
    opset: int  # the opset of the default domain the file declared (before any conversion)
    # (name, op type) of every named node of the ONNX graph, those no kernel runs too
    nodes: tuple[tuple[str, str], ...] = ()


def load_onnx(
    model: bytes | str | os.PathLike[str] | onnx.ModelProto,
    shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    limits: Limits = DEFAULT_LIMITS,
    external_data: bool = True,
) -> Graph:
    """Convert an ONNX model to a graph with static shapes; `shapes` binds dynamic input dims
    (input name -> full dims). `external_data`: read the external data files of a model given as a
    path, from its own directory (a model given as bytes or a proto never reads any file)."""
    return import_model(model, shapes, limits=limits, external_data=external_data).graph


def import_model(
    model: bytes | str | os.PathLike[str] | onnx.ModelProto,
    shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    limits: Limits = DEFAULT_LIMITS,
    external_data: bool = True,
) -> ImportedModel:
    """load_onnx, with what the file declared about itself (its opset)."""
    proto = parse_model(model, limits, external_data)
    declared = _default_opset(proto)
    skeleton = without_large_weights(proto)
    try:
        onnx.checker.check_model(skeleton)
    except onnx.checker.ValidationError as e:
        raise ModelError(f"model fails the ONNX checker: {_first_line(e)}") from None
    except (ValueError, RuntimeError, UnicodeError) as e:  # the checker's other ways of saying no
        raise ModelError(f"model fails the ONNX checker: {type(e).__name__}: {_first_line(e)}") from None
    native = spell_out_defaults(to_native_opset(proto, declared))
    if native is not proto:
        proto, skeleton = native, without_large_weights(native)
    opset = _default_opset(proto)
    try:
        inferred: onnx.GraphProto | None = onnx.shape_inference.infer_shapes(
            skeleton, check_type=True, strict_mode=True
        ).graph
        inference_error = ""
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as e:
        inferred, inference_error = None, _first_line(e)
    except (ValueError, RuntimeError, UnicodeError) as e:
        inferred, inference_error = None, f"{type(e).__name__}: {_first_line(e)}"
    _check_supported(proto, _scan(proto, opset, inferred))  # unsupported nodes are the more useful error
    if inference_error:
        raise ModelError(f"model fails ONNX shape inference: {inference_error}")
    inputs = bind_inputs(proto.graph, shapes or {})
    nodes = tuple((n.name, n.op_type) for n in proto.graph.node if n.name)
    return ImportedModel(_convert(proto.graph, inputs, opset, Budget(limits)), declared, nodes)


# attribute defaults that ONNX's shape inference reads otherwise than the op's definition (it takes
# an STFT without `onesided` as two-sided, where the default is one-sided, and then refuses the
# model's own declared output shape; MeanVarianceNormalization's function body fails on its missing
# `axes`): spelled out before inference, which changes no meaning
SPELLED_DEFAULTS: dict[str, dict[str, int | list[int]]] = {
    "STFT": {"onesided": 1},
    "MeanVarianceNormalization": {"axes": [0, 2, 3]},
}


def spell_out_defaults(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model with the SPELLED_DEFAULTS its main graph's nodes leave out written into them (itself
    when none is missing; the caller's model is never changed)."""
    missing = [
        (i, name, value)
        for i, node in enumerate(proto.graph.node)
        for name, value in SPELLED_DEFAULTS.get(node.op_type, {}).items()
        if node.domain in DEFAULT_DOMAINS and all(a.name != name for a in node.attribute)
    ]
    if not missing:
        return proto
    spelled = onnx.ModelProto()
    spelled.CopyFrom(proto)
    for i, name, value in missing:
        spelled.graph.node[i].attribute.append(helper.make_attribute(name, value))
    return spelled


SKELETON_MIN_BYTES = 1 << 16
"""Initializers of at least this many bytes are left out of the copy of the model that the ONNX
checker and shape inference see (see without_large_weights)."""


def without_large_weights(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its large initializers declared as graph inputs of the same type and shape
    instead (itself when it has none).

    The checker and shape inference each serialize the whole model, and shape inference returns it
    whole again: seconds for a model of hundreds of MB (VGG's 500 MB), although neither needs a
    weight's values (constants that carry shapes, such as a Reshape's target, are small). The guard
    has already checked every initializer's dtype and data against its dims."""
    graph = proto.graph
    large = {t.name for t in graph.initializer if guard.declared_bytes(t) >= SKELETON_MIN_BYTES}
    if not large:
        return proto
    skeleton = onnx.ModelProto()
    _copy_fields(proto, skeleton, skip="graph")
    _copy_fields(graph, skeleton.graph, skip="initializer")
    skeleton.graph.initializer.extend(t for t in graph.initializer if t.name not in large)
    declared = {i.name for i in graph.input}
    skeleton.graph.input.extend(
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in graph.initializer
        if t.name in large and t.name not in declared
    )
    return skeleton


def _copy_fields(src: Any, dst: Any, *, skip: str) -> None:
    """Every field set in the protobuf message `src` but `skip`, copied into `dst`."""
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        if field.is_repeated:
            getattr(dst, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


# ---- parsing ----------------------------------------------------------------------------------------


def parse_model(
    model: bytes | str | os.PathLike[str] | onnx.ModelProto,
    limits: Limits = DEFAULT_LIMITS,
    external_data: bool = False,
) -> onnx.ModelProto:
    """The model proto, checked by the guard before anything reads a tensor. External data is read
    only for a model given as a path with `external_data`, and only from files in its directory."""
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(bytes(model))
        except (DecodeError, ValueError, RecursionError) as e:
            raise ModelError(f"not a valid ONNX protobuf (corrupt or truncated): {e}") from None
    else:
        path = Path(os.fspath(model))
        try:
            proto = onnx.load(path, load_external_data=False)
        except OSError as e:
            raise ModelError(f"cannot read model file: {e}") from None
        except (DecodeError, ValueError, RecursionError) as e:
            raise ModelError(f"not a valid ONNX protobuf (corrupt or truncated): {e}") from None
        external = guard.check_model(proto, limits, allow_external=external_data)
        guard.resolve_external_data(external, path.parent)
    guard.check_model(proto, limits)
    if not proto.HasField("graph") or not proto.graph.output:
        raise ModelError("model has no graph or no outputs (empty or truncated file?)")
    return proto


def _default_opset(proto: onnx.ModelProto) -> int:
    versions: list[int] = [o.version for o in proto.opset_import if o.domain in DEFAULT_DOMAINS]
    if not versions:
        raise ModelError("model imports no opset of the default ONNX domain")
    version = max(versions)
    if version not in SUPPORTED_OPSETS:
        raise ModelError(
            f"model uses opset {version} of the default ONNX domain; temper supports opsets "
            f"{SUPPORTED_OPSETS.start} to {SUPPORTED_OPSETS.stop - 1}"
        )
    return version


def declared_opset(model: onnx.ModelProto) -> int:
    """The opset of the default domain the model declares (0 when it declares none)."""
    return max((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), default=0)


def to_native_opset(proto: onnx.ModelProto, declared: int) -> onnx.ModelProto:
    """The model in the nearest opset temper's converters implement (itself when it is one of them).

    Every node is named first (`Op_index`, its index in the file), so the converter's added nodes
    change no name the user sees in errors, `inspect`, overrides and the manifest. A node the
    converter cannot carry over is named in the error."""
    if declared in NATIVE_OPSETS:
        return proto
    target = NATIVE_OPSETS.start if declared < NATIVE_OPSETS.start else NATIVE_OPSETS.stop - 1
    named = onnx.ModelProto()
    named.CopyFrom(proto)
    for i, node in enumerate(named.graph.node):
        node.name = node_name(node, i)
    try:
        converted = version_converter.convert_version(named, target)
    except Exception as e:  # the converter reports in many ways; say which nodes it stopped at
        message = _first_line(e)
        nodes = _nodes_named_by(message, named.graph)
        where = f" (node(s) {', '.join(nodes[:8])})" if nodes else ""
        raise ModelError(
            f"cannot convert the model from opset {declared} to {target}{where}: {message}"
        ) from None
    _keep_node_names(named.graph, converted.graph)
    if declared < RESIZE_COORDINATES_OPSET:
        _legacy_resize_semantics(converted.graph)
    return converted


# Resize gained coordinate_transformation_mode and nearest_mode at opset 11, defaulting to half_pixel
# and round_prefer_floor; Upsample (7-9) and Resize-10 meant asymmetric coordinates, the nearest pixel
# at or below (above, when shrinking). onnx.version_converter carries neither over.
RESIZE_COORDINATES_OPSET = 11


def _legacy_resize_semantics(graph: onnx.GraphProto) -> None:
    """Write the meaning of an opset-10 Resize (or an Upsample converted to one) into the Resize nodes
    of `graph`, converted from such a model: asymmetric coordinates, and for nearest the floor when
    enlarging, the ceiling when shrinking (as onnxruntime computes those opsets)."""
    values = {t.name: t for t in graph.initializer}
    values.update(
        {n.output[0]: n.attribute[0].t for n in graph.node if n.op_type == "Constant" and n.attribute}
    )
    for node in graph.node:
        if node.op_type != "Resize" or any(
            a.name == "coordinate_transformation_mode" for a in node.attribute
        ):
            continue
        node.attribute.append(helper.make_attribute("coordinate_transformation_mode", "asymmetric"))
        scales = values.get(node.input[2]) if len(node.input) > 2 else None
        shrinking = scales is not None and bool((numpy_helper.to_array(scales) < 1).any())
        node.attribute.append(helper.make_attribute("nearest_mode", "ceil" if shrinking else "floor"))


def _nodes_named_by(message: str, graph: onnx.GraphProto) -> list[str]:
    """The nodes a converter message is about: by op type, else by an attribute it names."""
    nodes = [n.name for n in graph.node if re.search(rf"\b{re.escape(n.op_type)}\b", message)]
    if nodes:
        return nodes
    attributes = set(re.findall(r"[Aa]ttribute '?(\w+)", message))
    return [n.name for n in graph.node if attributes & {a.name for a in n.attribute}]


def _keep_node_names(original: onnx.GraphProto, converted: onnx.GraphProto) -> None:
    """A node the converter rewrote (Upsample into Resize, say) keeps the name of the node whose
    outputs it computes, so errors and the manifest still name the user's node."""
    names = {n.name for n in original.node}
    producer = {out: n.name for n in original.node for out in n.output if out}
    for node in converted.node:
        if node.name in names:
            continue
        owner = next((producer[out] for out in node.output if out in producer), None)
        if owner is not None:
            node.name = owner


# ---- the support scan -------------------------------------------------------------------------------


def node_name(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


def _input_names(graph: onnx.GraphProto) -> list[str]:
    inits = {t.name for t in graph.initializer}
    return [i.name for i in graph.input if i.name not in inits]


def _scan(proto: onnx.ModelProto, opset: int, inferred: onnx.GraphProto | None) -> ScanInfo:
    graph = proto.graph
    consts = {t.name for t in graph.initializer}
    for node in graph.node:
        inputs = [n for n in node.input if n]
        if node.op_type in _ALWAYS_CONST or (
            inputs and node.op_type not in _NEVER_FOLD and all(n in consts for n in inputs)
        ):
            consts.update(o for o in node.output if o)
    ranks: dict[str, int] = {t.name: len(t.dims) for t in graph.initializer}
    dtypes: dict[str, int] = {t.name: t.data_type for t in graph.initializer}
    typed = inferred if inferred is not None else graph
    for vi in (*typed.input, *typed.value_info, *typed.output):
        if not vi.type.HasField("tensor_type"):
            continue
        if vi.type.tensor_type.HasField("shape"):
            ranks.setdefault(vi.name, len(vi.type.tensor_type.shape.dim))
        if vi.type.tensor_type.elem_type != onnx.TensorProto.UNDEFINED:
            dtypes.setdefault(vi.name, vi.type.tensor_type.elem_type)
    used = {n for node in graph.node for n in node.input if n} | {o.name for o in graph.output}
    consumers: dict[str, list[str]] = {}
    for node in graph.node:
        for n in node.input:
            if n:
                consumers.setdefault(n, []).append(node.op_type)
    for o in graph.output:
        consumers.setdefault(o.name, []).append("")
    return ScanInfo(
        opset, frozenset(consts), ranks, frozenset(used), dtypes, {k: tuple(v) for k, v in consumers.items()}
    )


def _unsupported_reason(node: onnx.NodeProto, info: ScanInfo) -> str | None:
    if node.domain not in DEFAULT_DOMAINS:
        return f"domain {node.domain!r} is not supported"
    attrs = {a.name: decode_attribute(a) for a in node.attribute}
    conv = CONVERTERS.get(node.op_type)
    if conv is not None:
        return conv.check(node, attrs, info) if conv.check else None
    has_graph = any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)
    foldable = (
        node.op_type not in _NEVER_FOLD and not has_graph and all(o in info.consts for o in node.output if o)
    )
    if foldable:
        return None
    if node.op_type in QUANTIZED_OPS:
        return f"op {node.op_type} is a quantized (8-bit integer) op; quantized models are not supported yet"
    if has_graph:
        return f"op {node.op_type} holds a subgraph (control flow); temper compiles straight-line graphs"
    return f"op {node.op_type} is not supported (except on constant inputs)"


QUANTIZED_OPS = frozenset({"QLinearConv", "QLinearMatMul"})
"""The default domain's int8 ops temper does not convert: their models are named as quantized in
the unsupported error (QDQ and dynamically quantized models' ops are converted: convert_quant)."""


def _check_supported(proto: onnx.ModelProto, info: ScanInfo) -> None:
    graph = proto.graph
    domain_versions = {o.domain: o.version for o in proto.opset_import}
    bad: list[tuple[str, str, int]] = []
    reasons: list[str] = []
    inits = {t.name for t in graph.initializer}
    for vi in graph.input:
        if vi.name in inits:
            continue
        if not vi.type.HasField("tensor_type"):
            bad.append((vi.name, "graph input", info.opset))
            reasons.append(f"input {vi.name!r} is not a tensor")
        elif onnx_dtype_name(vi.type.tensor_type.elem_type) not in RUNTIME_DTYPES:
            dtype = guard.dtype_name(vi.type.tensor_type.elem_type)
            bad.append((vi.name, "graph input", info.opset))
            reasons.append(f"input {vi.name!r} has dtype {dtype} (supported: {', '.join(RUNTIME_DTYPES)})")
    for t in graph.initializer:
        if onnx_dtype_name(t.data_type) is None:
            bad.append((t.name, "initializer", info.opset))
            reasons.append(f"initializer {t.name!r} has dtype {guard.dtype_name(t.data_type)}")
    for i, node in enumerate(graph.node):
        reason = _unsupported_reason(node, info)
        if reason:
            name = node_name(node, i)
            bad.append((name, node.op_type, domain_versions.get(node.domain, info.opset)))
            reasons.append(f"{name}: {reason}")
    if bad:
        raise UnsupportedOpError(
            bad, f"{'; '.join(reasons)}. Supported ONNX ops: {', '.join(sorted(CONVERTERS))}"
        )


# ---- dynamic dims -----------------------------------------------------------------------------------


def declared_dims(vi: onnx.ValueInfoProto) -> list[int | str] | None:
    """Declared dims: int when static, the dim_param name (or '?') when dynamic; None if rank unknown.
    A negative dim_value (old exporters wrote -1 for a dynamic axis) is dynamic too."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [
        d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else (d.dim_param or "?")
        for d in tt.shape.dim
    ]


def _check_binding(
    name: str, declared: list[int | str] | None, dims: list[int], symbols: dict[str, tuple[int, str]]
) -> None:
    """A user binding must be positive, of the declared rank, agree with static dims, and give one
    value to each named dim across inputs."""
    if any(d < 1 for d in dims):
        raise ShapeError(f"input {name!r}: bound shape {dims} must be positive")
    if declared is None:
        return
    if len(declared) != len(dims):
        raise ShapeError(f"input {name!r} has rank {len(declared)}, bound shape {dims} has rank {len(dims)}")
    for i, (d, b) in enumerate(zip(declared, dims, strict=True)):
        if isinstance(d, int) and d != b:
            raise ShapeError(f"input {name!r} dim {i} is {d} in the model, bound to {b}")
        if isinstance(d, str) and d != "?":
            first = symbols.setdefault(d, (b, name))
            if first[0] != b:
                raise ShapeError(
                    f"dim {d!r} is bound to {first[0]} by input {first[1]!r} and to {b} by {name!r}"
                )


def bind_inputs(graph: onnx.GraphProto, shapes: Mapping[str, Sequence[int]]) -> list[Var]:
    """Graph inputs (not initializers) as Vars with static shapes; all unbound dims in one ShapeError."""
    names = _input_names(graph)
    unknown = sorted(set(shapes) - set(names))
    if unknown:
        raise ShapeError(f"shapes given for unknown input(s) {unknown}; the model's inputs are {names}")
    by_name = {vi.name: vi for vi in graph.input}
    problems: list[str] = []
    hints: list[str] = []
    symbols: dict[str, tuple[int, str]] = {}
    symbolic: set[str] = set()  # the dynamic dims the hint binds to 1
    out: list[Var] = []
    for name in names:
        declared = declared_dims(by_name[name])
        if name in shapes:
            dims = [int(d) for d in shapes[name]]
            _check_binding(name, declared, dims, symbols)
        elif declared is None:
            problems.append(f"input {name!r} has an unknown rank")
            hints.append(f"{name}=D1,D2,...")
            continue
        elif any(isinstance(d, str) for d in declared):
            problems += [
                f"input {name!r} dim {i} {d!r} is not bound"
                for i, d in enumerate(declared)
                if isinstance(d, str)
            ]
            symbolic.update(d for d in declared if isinstance(d, str))
            hints.append(f"{name}={','.join('1' if isinstance(d, str) else str(d) for d in declared)}")
            continue
        else:
            dims = [int(d) for d in declared]
        dtype = onnx_dtype_name(by_name[name].type.tensor_type.elem_type)
        assert dtype is not None
        out.append(Var(name, TensorType(tuple(dims), dtype)))
    if problems:
        raise ShapeError(
            f"{'; '.join(problems)}; pass the full input shapes, e.g. --shape {' --shape '.join(hints)}"
            + (f" (1 for {', '.join(repr(d) for d in sorted(symbolic))})" if symbolic else "")
        )
    return out


# ---- conversion -------------------------------------------------------------------------------------


def _convert(graph: onnx.GraphProto, inputs: list[Var], opset: int, budget: Budget) -> Graph:
    env: dict[str, Expr] = {}
    declared = {t.name: t.data_type for t in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.output and n.attribute and n.attribute[0].name == "value":
            declared[n.output[0]] = n.attribute[0].t.data_type
    for t in graph.initializer:
        env[t.name] = Const(t.name, _compute_dtype(numpy_helper.to_array(t)))
    for v in inputs:  # a float16 input is widened at once: the model computes in float32
        wide = COMPUTE_DTYPE.get(v.type.dtype)
        env[v.name] = (
            v
            if wide is None
            else emit("cast", [v], {"to": wide}, node=v.name, op_type="input", budget=budget)
        )
    for i, node in enumerate(graph.node):
        name = node_name(node, i)
        missing = [n for n in node.input if n and n not in env]
        if missing:
            raise ModelError(f"uses undefined value(s) {missing}", node=name, op=node.op_type)
        ctx = NodeContext(
            node=node,
            name=name,
            opset=opset,
            inputs=[env[n] if n else None for n in node.input],
            attrs={a.name: decode_attribute(a) for a in node.attribute},
            budget=budget,
            declared=declared,
        )
        try:
            conv = CONVERTERS.get(node.op_type)
            outs = conv.convert(ctx) if conv else _fold_with_onnx(ctx)
        except CompilerError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AssertionError) as e:
            raise CompilerError(f"cannot convert: {type(e).__name__}: {e}", node=name, op=node.op_type) from e
        for out_name, value in zip(node.output, outs, strict=False):
            if out_name and value is not None:
                env[out_name] = value
    outputs = []
    for o in graph.output:
        if o.name not in env:
            raise ModelError(f"graph output {o.name!r} is never computed")
        value = env[o.name]
        wanted = onnx_dtype_name(o.type.tensor_type.elem_type) if o.type.HasField("tensor_type") else None
        carried = _carried_integer(o)
        if carried is not None and value.type.dtype == "float32":
            if not isinstance(value, Const):
                raise UnsupportedOpError(
                    [(o.name, "output", opset)],
                    f"output {o.name!r} is {carried}: temper carries 8- and 16-bit integers in float32 "
                    "inside a model, not at its outputs",
                )
            value = Const(value.name, value.data.astype(carried))
        if wanted in COMPUTE_DTYPE and value.type.dtype == COMPUTE_DTYPE[wanted]:
            value = emit("cast", [value], {"to": wanted}, node=o.name, op_type="output", budget=budget)
        outputs.append(value)
    converted = Graph(tuple(inputs), tuple(outputs), tuple(o.name for o in graph.output))
    _check_total(converted, budget.limits)
    return converted


# 8- and 16-bit integer constants (a quantized model's weights and embedding tables) are carried in
# float32, where each of their values is exact, as convert_quant carries a quantized model's integers
CARRIED_INTEGERS = frozenset({"int8", "uint8", "int16", "uint16"})


def _carried_integer(value: onnx.ValueInfoProto) -> str | None:
    """The 8- or 16-bit integer type a graph output declares (None: another or none)."""
    if not value.type.HasField("tensor_type"):
        return None
    code = value.type.tensor_type.elem_type
    name = str(helper.tensor_dtype_to_np_dtype(code)) if code else ""
    return name if name in CARRIED_INTEGERS else None


def _compute_dtype(data: np.ndarray) -> np.ndarray:
    """A constant as the model computes with it (float16 weights become float32, and so do 8- and
    16-bit integers)."""
    if str(data.dtype) in CARRIED_INTEGERS:
        return data.astype(np.float32)
    wide = COMPUTE_DTYPE.get(str(data.dtype))
    return data if wide is None else data.astype(wide)


def _check_total(graph: Graph, limits: Limits) -> None:
    """Every value the graph computes must fit in memory together (the runtime's plan holds them)."""
    total = sum(v.type.size for v in (*graph.inputs, *graph.nodes()))
    if total > limits.total_value_elements:
        raise ShapeError(
            f"the model computes {total} elements in all; the limit is {limits.total_value_elements} "
            "(bind smaller input shapes?)"
        )


_BOUNDED_BY_INPUTS = frozenset({"NonZero", "Unique", "Compress"})
"""Ops whose data-dependent result is never larger than their inputs (NonZero: rank x elements)."""


def _check_fold_size(ctx: NodeContext, feeds: Mapping[str, np.ndarray]) -> None:
    """ONNX's shape inference sizes the outputs from the constant inputs before anything is evaluated:
    an op that would make a huge constant (Range to 2^40, OneHot of depth 10^9) is refused unrun."""
    try:
        schema = onnx.defs.get_schema(ctx.op_type, ctx.opset, ctx.node.domain)
        types = {
            n: helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in feeds.items()
        }
        data = {n: numpy_helper.from_array(a) for n, a in feeds.items()}
        inferred = onnx.shape_inference.infer_node_outputs(schema, ctx.node, types, data)
    except Exception as e:  # inference says no in many ways: the op cannot be sized
        raise ctx.error(f"cannot size {ctx.op_type}'s result before folding it: {_first_line(e)}") from None
    for name in ctx.node.output:
        tt = inferred[name].tensor_type if name in inferred else None
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim] if tt else [-1]
        if tt is None or not tt.HasField("shape") or min(dims, default=0) < 0:
            if ctx.op_type not in _BOUNDED_BY_INPUTS:
                raise ctx.error(
                    f"cannot size {ctx.op_type}'s result before folding it (its shape depends on data)"
                )
            # data decides the size, but never past every element of the inputs (times their rank)
            dims = [sum(a.size * max(a.ndim, 1) for a in feeds.values())]
        try:
            ctx.budget.check(TensorType(tuple(dims), "float32"))
        except ShapeError as e:
            raise ctx.error(e.message) from None
        if int(np.prod(dims, dtype=object)) > FOLD_ELEMENTS:
            raise ctx.error(
                f"{ctx.op_type} on constants would produce {dims}; at most {FOLD_ELEMENTS} elements fold"
            )


def _fold_with_onnx(ctx: NodeContext) -> Iterable[Expr]:
    """An op outside temper's vocabulary applied to constants: evaluate it with ONNX's reference."""
    from onnx.reference import ReferenceEvaluator

    feeds: dict[str, Any] = {}
    for n, v in zip(ctx.node.input, ctx.inputs, strict=True):
        if n:
            if not isinstance(v, Const):
                raise ctx.error(f"{ctx.op_type} is only supported on constant inputs")
            feeds[n] = v.data
    _check_fold_size(ctx, feeds)
    try:
        results = ReferenceEvaluator(ctx.node, opsets={"": ctx.opset}).run(None, feeds)
    except Exception as e:  # the reference raises anything; report it against the node
        raise ctx.error(f"cannot evaluate {ctx.op_type} on its constant inputs: {e}") from None
    outs = []
    for out_name, data in zip(ctx.node.output, results, strict=True):
        if not ctx.budget.fold(np.asarray(data).size):
            raise ctx.error(f"{ctx.op_type} on constants produced more elements than temper folds")
        arr = np.asarray(data)
        if str(arr.dtype) not in DTYPES:
            raise ctx.error(f"{ctx.op_type} produced dtype {arr.dtype}, which temper cannot hold")
        outs.append(Const(out_name or ctx.name, _compute_dtype(arr)))
    return outs
