"""Well-known architectures built with onnx.helper, so tests and benchmarks use real shapes without torch.

Every builder returns an `onnx.ModelProto` (opset 17 unless stated, fp32) whose weights come from a
seeded numpy generator with sensible scales: He-initialised convolutions, BN statistics with a positive
variance and residual branches that start small, so activations stay O(1) through the whole network
and fp32 comparisons against onnxruntime are meaningful. The node and value names follow what a
PyTorch export would produce, so a model reads like a real one in temper's IR dumps.
`small_conv_model` is the exception: a minimal conv net that pipeline and tuner tests compile and
tune in seconds.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from typing import Literal

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
"""The default opset of every builder (Gelu as an op needs 20: see `bert_layer`)."""

_IR_VERSION = {17: 8, 20: 9}
"""IR version matching each opset's onnx release, so older runtimes accept the files."""

Dim = int | str
"""A tensor dimension: a fixed size, or a dim_param name the compiler must bind."""


class _GraphBuilder:
    """Collects nodes and initializers of one graph; names every value uniquely and readably."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._used: Counter[str] = Counter()

    def fresh(self, base: str) -> str:
        """`base` the first time, then `base_1`, `base_2`, ..."""
        count = self._used[base]
        self._used[base] += 1
        return base if count == 0 else f"{base}_{count}"

    def const(self, base: str, value: np.ndarray) -> str:
        name = self.fresh(base)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: Sequence[str], base: str, **attrs: object) -> str:
        """Append one single-output node; returns the output's name (which is also the node's name)."""
        out = self.fresh(base)
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=out, **attrs))
        return out

    def normal(self, shape: Sequence[int], std: float) -> np.ndarray:
        return (self.rng.standard_normal(tuple(shape)) * std).astype(np.float32)

    def uniform(self, shape: Sequence[int], low: float, high: float) -> np.ndarray:
        return self.rng.uniform(low, high, tuple(shape)).astype(np.float32)

    # -- layers ---------------------------------------------------------------------------------

    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        kernel: int,
        name: str,
        *,
        stride: int = 1,
        groups: int = 1,
        bias: bool = False,
    ) -> str:
        """Conv with He-normal weights (std sqrt(2 / fan_in)); padding keeps 'same' spatial size / stride."""
        fan_in = cin // groups * kernel * kernel
        weight = self.const(
            f"{name}.weight", self.normal((cout, cin // groups, kernel, kernel), math.sqrt(2 / fan_in))
        )
        inputs = [x, weight]
        if bias:
            inputs.append(self.const(f"{name}.bias", self.normal((cout,), 0.05)))
        pad = kernel // 2
        return self.op(
            "Conv",
            inputs,
            name,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad, pad, pad, pad],
            dilations=[1, 1],
            group=groups,
        )

    def batchnorm(self, x: str, channels: int, name: str, *, gamma: tuple[float, float] = (0.8, 1.2)) -> str:
        """Inference BN: gamma drawn from `gamma`, small beta and mean, variance in [0.5, 1.5] (positive)."""
        scale = self.const(f"{name}.weight", self.uniform((channels,), *gamma))
        beta = self.const(f"{name}.bias", self.normal((channels,), 0.05))
        mean = self.const(f"{name}.running_mean", self.normal((channels,), 0.05))
        var = self.const(f"{name}.running_var", self.uniform((channels,), 0.5, 1.5))
        return self.op("BatchNormalization", [x, scale, beta, mean, var], name, epsilon=1e-5)

    def relu6(self, x: str, name: str) -> str:
        """ReLU6 as PyTorch exports it at opset >= 11: Clip with constant min/max inputs."""
        low = self.const(f"{name}.min", np.array(0.0, np.float32))
        high = self.const(f"{name}.max", np.array(6.0, np.float32))
        return self.op("Clip", [x, low, high], name)

    def linear(self, x: str, fin: int, fout: int, name: str) -> str:
        """nn.Linear as exported: Gemm(x, W[out, in], b, transB=1); weights std 1/sqrt(fan_in)."""
        weight = self.const(f"{name}.weight", self.normal((fout, fin), 1 / math.sqrt(fin)))
        bias = self.const(f"{name}.bias", self.normal((fout,), 0.05))
        return self.op("Gemm", [x, weight, bias], name, transB=1)

    def matmul_add(self, x: str, fin: int, fout: int, name: str, *, std: float = 0.02) -> str:
        """nn.Linear on a 3-D activation as exported: MatMul(x, W[in, out]) + bias (BERT init std 0.02)."""
        weight = self.const(f"{name}.weight", self.normal((fin, fout), std))
        bias = self.const(f"{name}.bias", self.normal((fout,), std))
        return self.op("Add", [self.op("MatMul", [x, weight], f"{name}/MatMul"), bias], f"{name}/Add")

    def layernorm(self, x: str, hidden: int, name: str, *, epsilon: float = 1e-12) -> str:
        scale = self.const(f"{name}.weight", self.uniform((hidden,), 0.9, 1.1))
        bias = self.const(f"{name}.bias", self.normal((hidden,), 0.02))
        return self.op("LayerNormalization", [x, scale, bias], name, axis=-1, epsilon=epsilon)

    # -- the model ------------------------------------------------------------------------------

    def rename(self, value: str, new: str) -> None:
        """Give a graph output its public name (as exporters do) instead of appending an Identity."""
        for node in self.nodes:
            node.output[:] = [new if o == value else o for o in node.output]
            node.input[:] = [new if i == value else i for i in node.input]

    def model(
        self,
        name: str,
        inputs: Sequence[tuple[str, Sequence[Dim]]],
        outputs: Sequence[tuple[str, Sequence[Dim]]],
        *,
        opset: int = OPSET,
    ) -> onnx.ModelProto:
        def info(value: str, shape: Sequence[Dim]) -> onnx.ValueInfoProto:
            return helper.make_tensor_value_info(value, TensorProto.FLOAT, list(shape))

        graph = helper.make_graph(
            self.nodes,
            name,
            [info(n, s) for n, s in inputs],
            [info(n, s) for n, s in outputs],
            initializer=self.initializers,
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", opset)],
            producer_name="temper-tests",
            ir_version=_IR_VERSION[opset],
        )
        onnx.checker.check_model(model)
        return model


# -- ResNet-18 -------------------------------------------------------------------------------------


def _basic_block(g: _GraphBuilder, x: str, cin: int, cout: int, stride: int, name: str) -> str:
    """torchvision's BasicBlock: conv3x3-BN-ReLU-conv3x3-BN, 1x1 conv+BN shortcut when the shape changes."""
    y = g.op(
        "Relu",
        [g.batchnorm(g.conv(x, cin, cout, 3, f"{name}.conv1", stride=stride), cout, f"{name}.bn1")],
        f"{name}.relu",
    )
    # The branch's last BN starts small (as trained residual nets end up), so the sum stays O(1).
    y = g.batchnorm(g.conv(y, cout, cout, 3, f"{name}.conv2"), cout, f"{name}.bn2", gamma=(0.2, 0.5))
    shortcut = x
    if stride != 1 or cin != cout:
        shortcut = g.batchnorm(
            g.conv(x, cin, cout, 1, f"{name}.downsample.0", stride=stride), cout, f"{name}.downsample.1"
        )
    return g.op("Relu", [g.op("Add", [y, shortcut], f"{name}.add")], f"{name}.relu_1")


def resnet18(batch: Dim = "N", *, image: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 (torchvision layout): input "input" [batch, 3, image, image] -> "logits" [batch, classes].

    The batch dimension is the dim_param "N" by default, as in a real export with a dynamic batch, so
    compiling it needs `shapes={"input": (...)}`; pass an int for a fixed batch.
    """
    g = _GraphBuilder(seed)
    x = g.op("Relu", [g.batchnorm(g.conv("input", 3, 64, 7, "conv1", stride=2), 64, "bn1")], "relu")
    x = g.op("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            x = _basic_block(g, x, cin, cout, stride, f"layer{stage}.{block}")
            cin = cout
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x], "avgpool")], "flatten", axis=1)
    g.rename(g.linear(x, 512, classes, "fc"), "logits")
    return g.model("resnet18", [("input", [batch, 3, image, image])], [("logits", [batch, classes])])


# -- MobileNetV2 -----------------------------------------------------------------------------------

_MBV2_SETTINGS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
"""(expansion t, output channels c, repeats n, first stride s) per stage, from the MobileNetV2 paper."""


def _conv_bn(
    g: _GraphBuilder,
    x: str,
    cin: int,
    cout: int,
    kernel: int,
    name: str,
    *,
    stride: int = 1,
    groups: int = 1,
    act: bool = True,
    gamma: tuple[float, float] = (0.8, 1.2),
) -> str:
    """torchvision's Conv2dNormActivation: conv (no bias) + BN (+ ReLU6)."""
    y = g.batchnorm(
        g.conv(x, cin, cout, kernel, f"{name}.0", stride=stride, groups=groups),
        cout,
        f"{name}.1",
        gamma=gamma,
    )
    return g.relu6(y, f"{name}.2") if act else y


def _inverted_residual(g: _GraphBuilder, x: str, cin: int, cout: int, stride: int, t: int, name: str) -> str:
    """Expand 1x1 (when t != 1) -> depthwise 3x3 -> linear project 1x1; residual add when shapes match."""
    hidden = cin * t
    y = x
    index = 0
    if t != 1:
        y = _conv_bn(g, y, cin, hidden, 1, f"{name}.conv.{index}")
        index += 1
    y = _conv_bn(g, y, hidden, hidden, 3, f"{name}.conv.{index}", stride=stride, groups=hidden)
    residual = stride == 1 and cin == cout
    y = _conv_bn(
        g,
        y,
        hidden,
        cout,
        1,
        f"{name}.conv.{index + 1}",
        act=False,
        gamma=(0.2, 0.5) if residual else (0.8, 1.2),
    )
    return g.op("Add", [x, y], f"{name}.add") if residual else y


def mobilenet_v2(batch: Dim = 1, *, image: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2 (width 1.0): input "input" [batch, 3, image, image] -> "logits" [batch, classes]."""
    g = _GraphBuilder(seed)
    x = _conv_bn(g, "input", 3, 32, 3, "features.0", stride=2)
    cin, index = 32, 1
    for t, c, n, s in _MBV2_SETTINGS:
        for i in range(n):
            x = _inverted_residual(g, x, cin, c, s if i == 0 else 1, t, f"features.{index}")
            cin, index = c, index + 1
    x = _conv_bn(g, x, cin, 1280, 1, f"features.{index}")
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x], "avgpool")], "flatten", axis=1)
    g.rename(g.linear(x, 1280, classes, "classifier.1"), "logits")
    return g.model("mobilenet_v2", [("input", [batch, 3, image, image])], [("logits", [batch, classes])])


# -- BERT encoder layer ----------------------------------------------------------------------------


def _gelu(g: _GraphBuilder, x: str, name: str, form: Literal["erf", "op"]) -> str:
    if form == "op":
        return g.op("Gelu", [x], name)
    # The exact GELU as exporters spell it: 0.5 * x * (1 + erf(x / sqrt(2))).
    scaled = g.op("Div", [x, g.const(f"{name}.sqrt2", np.array(math.sqrt(2), np.float32))], f"{name}/Div")
    one_plus = g.op(
        "Add",
        [g.op("Erf", [scaled], f"{name}/Erf"), g.const(f"{name}.one", np.array(1, np.float32))],
        f"{name}/Add",
    )
    product = g.op("Mul", [x, one_plus], f"{name}/Mul")
    return g.op("Mul", [product, g.const(f"{name}.half", np.array(0.5, np.float32))], f"{name}/Mul_1")


def bert_layer(
    seq: int = 128,
    hidden: int = 768,
    heads: int = 12,
    ffn: int = 3072,
    *,
    gelu: Literal["erf", "op"] = "erf",
    seed: int = 0,
) -> onnx.ModelProto:
    """One BERT-base encoder layer: "hidden_states" [1, seq, hidden] -> "output" [1, seq, hidden].

    Self-attention (Q/K/V MatMul+Add, Reshape/Transpose to heads, QK^T / sqrt(d), Softmax, x V, output
    projection), residual + LayerNorm, FFN with GELU, residual + LayerNorm. `gelu="erf"` spells GELU with
    Erf (opset 17); `gelu="op"` uses the Gelu op and makes the model opset 20.
    """
    if hidden % heads:
        raise ValueError(f"hidden size {hidden} is not divisible by {heads} heads")
    head_dim = hidden // heads
    g = _GraphBuilder(seed)
    x = "hidden_states"
    to_heads = g.const("attention.heads_shape", np.array([0, -1, heads, head_dim], np.int64))

    def heads_of(name: str, perm: list[int], std: float) -> str:
        projected = g.matmul_add(x, hidden, hidden, f"attention.self.{name}", std=std)
        split = g.op("Reshape", [projected, to_heads], f"attention.self.{name}/Reshape")
        return g.op("Transpose", [split], f"attention.self.{name}/Transpose", perm=perm)

    # Query/key weights a little larger than BERT's init std 0.02, so the attention is peaked (as in a
    # trained model) rather than uniform, and Softmax's numerics are really exercised.
    query = heads_of("query", [0, 2, 1, 3], 0.05)  # [1, heads, seq, d]
    key_t = heads_of("key", [0, 2, 3, 1], 0.05)  # [1, heads, d, seq]
    value = heads_of("value", [0, 2, 1, 3], 0.02)  # [1, heads, seq, d]
    scores = g.op("MatMul", [query, key_t], "attention.self/MatMul")
    scale = g.const("attention.self.scale", np.array(math.sqrt(head_dim), np.float32))
    probs = g.op(
        "Softmax", [g.op("Div", [scores, scale], "attention.self/Div")], "attention.self/Softmax", axis=-1
    )
    context = g.op("MatMul", [probs, value], "attention.self/MatMul_1")
    context = g.op("Transpose", [context], "attention.self/Transpose", perm=[0, 2, 1, 3])
    merged_shape = g.const("attention.merged_shape", np.array([0, -1, hidden], np.int64))
    context = g.op("Reshape", [context, merged_shape], "attention.self/Reshape")
    attn = g.matmul_add(context, hidden, hidden, "attention.output.dense")
    attn = g.layernorm(g.op("Add", [attn, x], "attention.output/Add"), hidden, "attention.output.LayerNorm")
    inter = _gelu(g, g.matmul_add(attn, hidden, ffn, "intermediate.dense"), "intermediate.gelu", gelu)
    out = g.matmul_add(inter, ffn, hidden, "output.dense")
    out = g.layernorm(g.op("Add", [out, attn], "output/Add"), hidden, "output.LayerNorm")
    g.rename(out, "output")
    return g.model(
        "bert_layer",
        [("hidden_states", [1, seq, hidden])],
        [("output", [1, seq, hidden])],
        opset=20 if gelu == "op" else OPSET,
    )


# -- MLP ------------------------------------------------------------------------------------------


def mlp(batch: Dim = 1, *, sizes: Sequence[int] = (784, 512, 512, 10), seed: int = 0) -> onnx.ModelProto:
    """An MNIST-style MLP 784-512-512-10 of Gemm+Relu: "input" [batch, 784] -> "logits" [batch, 10]."""
    g = _GraphBuilder(seed)
    x = "input"
    layers = list(itertools.pairwise(sizes))
    for i, (fin, fout) in enumerate(layers):
        x = g.linear(x, fin, fout, f"fc{i + 1}")
        if i < len(layers) - 1:
            x = g.op("Relu", [x], f"relu{i + 1}")
    g.rename(x, "logits")
    return g.model("mlp", [("input", [batch, sizes[0]])], [("logits", [batch, sizes[-1]])])


# -- small conv net -------------------------------------------------------------------------------


def small_conv_model() -> onnx.ModelProto:
    """conv(+bias) -> relu -> global average pool -> flatten -> gemm: one anchor of each kind, small enough
    that pipeline and tuner tests compile and tune it in seconds ("x" [1, 8, 16, 16] -> "y" [1, 10])."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2, "w"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal((16, 10)).astype(np.float32), "fc"),
        numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc", "fc_b"], ["y"], name="head"),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


BUILDERS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2, "bert_layer": bert_layer, "mlp": mlp}
"""Name -> builder, for parametrised tests and the benchmarks (each callable with no arguments)."""
