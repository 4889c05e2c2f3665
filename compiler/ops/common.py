"""Shape rules and attribute checks shared by the op families (and the ONNX frontend).

Every failure is a ShapeError; callers that know the node (the frontend, the verifier) re-raise it
with the node name attached.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from compiler.errors import ShapeError
from compiler.tensor_type import TensorType

FLOAT = "float32"
INDEX_DTYPES = ("int64", "int32")
NUMERIC = (FLOAT, *INDEX_DTYPES)
ANY_DTYPE = (*NUMERIC, "bool")


def fail(message: str) -> ShapeError:
    """Build the error an infer function raises (the frontend adds the node name)."""
    return ShapeError(message)


def expect_args(op: str, types: Sequence[TensorType], count: int) -> None:
    if len(types) != count:
        raise fail(f"{op} takes {count} argument(s), got {len(types)}")


def expect_dtype(op: str, t: TensorType, allowed: Sequence[str], what: str = "input") -> None:
    if t.dtype not in allowed:
        raise fail(f"{op} {what} has dtype {t.dtype}; supported: {', '.join(allowed)}")


def expect_same_dtype(op: str, types: Sequence[TensorType]) -> str:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise fail(f"{op} arguments have different dtypes: {', '.join(t.dtype for t in types)}")
    return types[0].dtype


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """numpy (multidirectional) broadcasting of static shapes."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise fail(f"shapes {' and '.join(str(list(s)) for s in shapes)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    """Turn an ONNX axis (negative counts from the end) into a non-negative one."""
    if not -rank <= axis < max(rank, 1):
        raise fail(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


# ---- attribute readers (infer functions validate the attributes they use) -------------------------


def int_attr(attrs: dict[str, Any], key: str) -> int:
    v = attrs.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise fail(f"attribute {key!r} must be an int, got {v!r}")
    return v


def float_attr(attrs: dict[str, Any], key: str) -> float:
    v = attrs.get(key)
    if not isinstance(v, float):
        raise fail(f"attribute {key!r} must be a float, got {v!r}")
    return v


def str_attr(attrs: dict[str, Any], key: str, choices: Sequence[str]) -> str:
    v = attrs.get(key)
    if v not in choices:
        raise fail(f"attribute {key!r} must be one of {', '.join(choices)}, got {v!r}")
    return str(v)


def ints_attr(attrs: dict[str, Any], key: str, length: int | None = None) -> tuple[int, ...]:
    v = attrs.get(key)
    if not isinstance(v, tuple) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise fail(f"attribute {key!r} must be a tuple of ints, got {v!r}")
    if length is not None and len(v) != length:
        raise fail(f"attribute {key!r} must have {length} values, got {len(v)}")
    return v


def floats_attr(attrs: dict[str, Any], key: str, length: int | None = None) -> tuple[float, ...]:
    v = attrs.get(key)
    if not isinstance(v, tuple) or not all(isinstance(x, float) for x in v):
        raise fail(f"attribute {key!r} must be a tuple of floats, got {v!r}")
    if length is not None and len(v) != length:
        raise fail(f"attribute {key!r} must have {length} values, got {len(v)}")
    return v


def positive(key: str, values: Sequence[int]) -> None:
    if any(v < 1 for v in values):
        raise fail(f"attribute {key!r} must be positive, got {list(values)}")


def non_negative(key: str, values: Sequence[int]) -> None:
    if any(v < 0 for v in values):
        raise fail(f"attribute {key!r} must be non-negative, got {list(values)}")


# ---- sliding-window arithmetic (conv, conv_transpose, pools, auto_pad) -----------------------------


def window_extent(kernel: int, dilation: int) -> int:
    return (kernel - 1) * dilation + 1


def conv_out_size(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int) -> int:
    return (size + pad_begin + pad_end - window_extent(kernel, dilation)) // stride + 1


def pool_out_size(
    size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int, ceil_mode: bool
) -> int:
    """ONNX pool output length; with ceil_mode the last window must start inside input or left pad."""
    span = size + pad_begin + pad_end - window_extent(kernel, dilation)
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def same_pads(size: int, kernel: int, stride: int, dilation: int, upper: bool) -> tuple[int, int]:
    """auto_pad SAME_UPPER / SAME_LOWER: output = ceil(size / stride); extra pad at end (upper) or begin."""
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + window_extent(kernel, dilation) - size, 0)
    small = total // 2
    return (small, total - small) if upper else (total - small, small)


def slice_len(start: int, end: int, step: int) -> int:
    """Elements selected by a resolved slice (end may be -1 for a negative step: 'through index 0')."""
    if step > 0:
        return max(0, -(-(end - start) // step))
    return max(0, -(-(start - end) // -step))
