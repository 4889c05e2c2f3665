"""The type of a tensor value: its static shape and dtype.

The graph IR, the op definitions and the TIR printer all speak of it, so it lives below all of them
(compiler.graph imports compiler.ops, which must not import compiler.graph back).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Short dtype names used by the printer and everywhere else in the compiler.
DTYPES: dict[str, str] = {
    "float32": "f32",
    "float64": "f64",
    "float16": "f16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "bool",
}
SHORT_TO_DTYPE = {v: k for k, v in DTYPES.items()}


@dataclass(frozen=True, slots=True)
class TensorType:
    """Static shape and dtype of one value."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"unsupported dtype {self.dtype!r}")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __str__(self) -> str:
        return f"{DTYPES[self.dtype]}[{', '.join(str(d) for d in self.shape)}]"


def raw_bytes(a: np.ndarray) -> memoryview:
    """The array's bytes in C order, as a flat view: copied only when the array is not C-contiguous
    (hashing or packing a model's weights, hundreds of MB, without copying them)."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8).data
