"""A tiny ONNX -> PyTorch-eager interpreter, so the model benchmark can time PyTorch on the same graphs.

It runs the graph node by node with torch's functional ops, the way a hand-written eager `nn.Module`
(torchvision's ResNet, a BERT layer) calls them: one ATen kernel per node, no graph fusion. Only the ops
the benchmark's models use are here; a model with any other op is refused up front (`UnsupportedModel`),
and the benchmark reports PyTorch as not measured for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper


class UnsupportedModel(Exception):
    """The model uses ops this interpreter does not implement."""


Attrs = dict[str, Any]
OpFn = Callable[[Any, list[Any], Attrs, int], Any]


def _attrs(node: onnx.NodeProto) -> Attrs:
    values = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in values.items()}


def _spatial_pads(x_hw: Sequence[int], kernel: Sequence[int], attrs: Attrs) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from `pads` or `auto_pad` (SAME_UPPER puts the odd pixel at the end)."""
    strides = attrs.get("strides", [1, 1])
    dilations = attrs.get("dilations", [1, 1])
    mode = attrs.get("auto_pad", "NOTSET")
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        total = []
        for size, k, s, d in zip(x_hw, kernel, strides, dilations, strict=True):
            out = math.ceil(size / s)
            total.append(max(0, (out - 1) * s + (k - 1) * d + 1 - size))
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        begin, end = (small, big) if mode == "SAME_UPPER" else (big, small)
        return begin[0], begin[1], end[0], end[1]
    if mode == "VALID":
        return 0, 0, 0, 0
    pads = attrs.get("pads", [0, 0, 0, 0])
    return pads[0], pads[1], pads[2], pads[3]


def _conv(torch: Any, x: list[Any], attrs: Attrs, opset: int) -> Any:
    data, weight = x[0], x[1]
    bias = x[2] if len(x) > 2 else None
    kernel = attrs.get("kernel_shape", list(weight.shape[2:]))
    top, left, bottom, right = _spatial_pads(data.shape[2:], kernel, attrs)
    padding: Any = (top, left)
    if (top, left) != (bottom, right):
        data = torch.nn.functional.pad(data, (left, right, top, bottom))
        padding = 0
    return torch.nn.functional.conv2d(
        data,
        weight,
        bias,
        stride=attrs.get("strides", [1, 1]),
        padding=padding,
        dilation=attrs.get("dilations", [1, 1]),
        groups=attrs.get("group", 1),
    )


def _maxpool(torch: Any, x: list[Any], attrs: Attrs, opset: int) -> Any:
    kernel = attrs["kernel_shape"]
    top, left, bottom, right = _spatial_pads(x[0].shape[2:], kernel, attrs)
    data = x[0]
    if (top, left, bottom, right) != (0, 0, 0, 0):
        data = torch.nn.functional.pad(data, (left, right, top, bottom), value=-math.inf)
    return torch.nn.functional.max_pool2d(
        data,
        kernel,
        stride=attrs.get("strides", kernel),
        dilation=attrs.get("dilations", [1, 1]),
        ceil_mode=bool(attrs.get("ceil_mode", 0)),
    )


def _gemm(torch: Any, x: list[Any], attrs: Attrs, opset: int) -> Any:
    a, b = x[0], x[1]
    c = x[2] if len(x) > 2 else None
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    if attrs.get("transA", 0):
        a = a.t()
    if attrs.get("transB", 0) and alpha == 1.0 and beta == 1.0 and (c is None or c.dim() == 1):
        return torch.nn.functional.linear(a, b, c)  # nn.Linear's own call
    if attrs.get("transB", 0):
        b = b.t()
    y = torch.matmul(a, b)
    if alpha != 1.0:
        y = y * alpha
    return y if c is None else y + (c * beta if beta != 1.0 else c)


def _softmax(torch: Any, x: list[Any], attrs: Attrs, opset: int) -> Any:
    data = x[0]
    axis = attrs.get("axis", -1 if opset >= 13 else 1)
    if opset >= 13:
        return torch.softmax(data, axis)
    axis %= data.dim()  # before 13: softmax over the 2-D coercion [prod(shape[:axis]), prod(shape[axis:])]
    flat = data.reshape(math.prod(data.shape[:axis]), -1)
    return torch.softmax(flat, 1).reshape(data.shape)


def _reshape(torch: Any, x: list[Any], attrs: Attrs, opset: int) -> Any:
    shape = [int(s) for s in x[1].tolist()]
    if not attrs.get("allowzero", 0):
        shape = [x[0].shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return x[0].reshape(shape)


def _slice(torch: Any, x: list[Any], attrs: Attrs, opset: int) -> Any:
    data = x[0]
    starts, ends = x[1].tolist(), x[2].tolist()
    axes = x[3].tolist() if len(x) > 3 and x[3] is not None else list(range(len(starts)))
    steps = x[4].tolist() if len(x) > 4 and x[4] is not None else [1] * len(starts)
    index: list[slice] = [slice(None)] * data.dim()
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        if step != 1:
            raise UnsupportedModel("Slice with a step other than 1")
        index[axis] = slice(start, end)
    return data[tuple(index)]


def _shape(torch: Any, x: list[Any], attrs: Attrs, opset: int) -> Any:
    dims = list(x[0].shape)[attrs.get("start", 0) : attrs.get("end", None)]
    return torch.tensor(dims, dtype=torch.int64)


def _flatten(torch: Any, x: list[Any], attrs: Attrs, opset: int) -> Any:
    axis = attrs.get("axis", 1) % max(1, x[0].dim())
    return x[0].reshape(math.prod(x[0].shape[:axis]), -1)


def _layernorm(torch: Any, x: list[Any], attrs: Attrs, opset: int) -> Any:
    axis = attrs.get("axis", -1) % x[0].dim()
    bias = x[2] if len(x) > 2 else None
    return torch.nn.functional.layer_norm(x[0], x[0].shape[axis:], x[1], bias, attrs.get("epsilon", 1e-5))


def _clip(torch: Any, x: list[Any], attrs: Attrs, opset: int) -> Any:
    low = x[1] if len(x) > 1 and x[1] is not None else attrs.get("min")
    high = x[2] if len(x) > 2 and x[2] is not None else attrs.get("max")
    return torch.clamp(x[0], low, high)


def _prelu(torch: Any, x: list[Any], attrs: Attrs, opset: int) -> Any:
    data, slope = x[0], x[1]
    # Slope dims align with data's trailing dims; nn.PReLU's kernel takes one slope per axis-1 channel.
    channel_from_right = data.dim() - 2
    off_channel = [
        size for i, size in enumerate(reversed(slope.shape)) if size != 1 and i != channel_from_right
    ]
    if data.dim() > 1 and not off_channel and slope.numel() in (1, data.shape[1]):
        return torch.nn.functional.prelu(data, slope.reshape(-1))
    return torch.where(data >= 0, data, data * slope)


OPS: dict[str, OpFn] = {
    "Conv": _conv,
    "MaxPool": _maxpool,
    "Gemm": _gemm,
    "Softmax": _softmax,
    "Reshape": _reshape,
    "Slice": _slice,
    "Shape": _shape,
    "Flatten": _flatten,
    "LayerNormalization": _layernorm,
    "Clip": _clip,
    "BatchNormalization": lambda t, x, a, o: t.nn.functional.batch_norm(
        x[0], x[3], x[4], x[1], x[2], training=False, eps=a.get("epsilon", 1e-5)
    ),
    "GlobalAveragePool": lambda t, x, a, o: t.nn.functional.adaptive_avg_pool2d(x[0], 1),
    "Relu": lambda t, x, a, o: t.relu(x[0]),
    "PRelu": _prelu,
    "HardSwish": lambda t, x, a, o: t.nn.functional.hardswish(x[0]),
    "HardSigmoid": lambda t, x, a, o: t.clamp(x[0] * a.get("alpha", 0.2) + a.get("beta", 0.5), 0.0, 1.0),
    "Erf": lambda t, x, a, o: t.erf(x[0]),
    "Identity": lambda t, x, a, o: x[0],
    "Add": lambda t, x, a, o: x[0] + x[1],
    "Sub": lambda t, x, a, o: x[0] - x[1],
    "Mul": lambda t, x, a, o: x[0] * x[1],
    "Div": lambda t, x, a, o: x[0] / x[1],
    "MatMul": lambda t, x, a, o: t.matmul(x[0], x[1]),
    # A new tensor, as ONNX defines it (a strided view would send later kernels down slow paths).
    "Transpose": lambda t, x, a, o: x[0].permute(a.get("perm", list(range(x[0].dim()))[::-1])).contiguous(),
    "Concat": lambda t, x, a, o: t.cat(x, a["axis"]),
}


class TorchInterpreter:
    """Runs an ONNX graph in eager PyTorch: `interpreter(feeds) -> [outputs as numpy]`."""

    def __init__(self, model: onnx.ModelProto, torch: Any) -> None:
        missing = sorted(
            {n.op_type for n in model.graph.node if n.op_type not in OPS or n.domain not in ("", "ai.onnx")}
        )
        if missing:
            raise UnsupportedModel(f"ops not in the ONNX->torch interpreter: {', '.join(missing)}")
        self._torch = torch
        self._opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self._constants = {
            init.name: torch.from_numpy(np.array(numpy_helper.to_array(init)))
            for init in model.graph.initializer
        }
        self._nodes = [(OPS[n.op_type], list(n.input), list(n.output), _attrs(n)) for n in model.graph.node]
        self._outputs = [o.name for o in model.graph.output]

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        torch = self._torch
        with torch.inference_mode():
            env: dict[str, Any] = dict(self._constants)
            env.update((name, torch.from_numpy(array)) for name, array in feeds.items())
            for fn, inputs, outputs, attrs in self._nodes:
                env[outputs[0]] = fn(torch, [env[i] if i else None for i in inputs], attrs, self._opset)
            return [env[name].numpy() for name in self._outputs]
