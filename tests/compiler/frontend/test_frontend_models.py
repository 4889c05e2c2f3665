"""Whole models (small configurations of the benchmark architectures) through the frontend vs onnxruntime."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from compiler.frontend.onnx import SUPPORTED_OPSETS
from compiler.graph.ir import Const
from tests.compiler.frontend.onnx_check import check_against_ort
from tests.models import builders
from tests.models.fetch import REAL_MODELS, RegistryUnreachableError


def feeds_for(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_resnet18_with_dynamic_batch() -> None:
    model = builders.resnet18(image=64, classes=10)
    x = feeds_for((2, 3, 64, 64))
    graph = check_against_ort(model, {"input": x}, shapes={"input": x.shape})
    ops = Counter(c.op for c in graph.calls())
    assert ops["conv2d"] == 20 and ops["batch_norm"] == 20 and ops["max_pool2d"] == 1
    assert ops["reduce_mean"] == 1 and ops["matmul"] == 1
    assert graph.output_names == ("logits",)
    assert "layer1.0.conv1" in {c.name for c in graph.calls()}


def test_mobilenet_v2() -> None:
    model = builders.mobilenet_v2(image=32, classes=10)
    graph = check_against_ort(model, {"input": feeds_for((1, 3, 32, 32))})
    depthwise = [c for c in graph.calls() if c.op == "conv2d" and c.attr("groups") > 1]
    assert len(depthwise) == 17
    assert any(c.op == "clip" and c.attr("max") == 6.0 for c in graph.calls())


@pytest.mark.parametrize("gelu", ["erf", "op"])
def test_bert_layer(gelu: str) -> None:
    model = builders.bert_layer(seq=16, hidden=64, heads=4, ffn=128, gelu=gelu)  # type: ignore[arg-type]
    graph = check_against_ort(model, {"hidden_states": feeds_for((1, 16, 64))})
    ops = Counter(c.op for c in graph.calls())
    assert ops["softmax"] == 1 and ops["matmul"] == 8
    assert ops["layer_norm"] + ops["reduce_mean"] >= 2


def test_mlp() -> None:
    graph = check_against_ort(builders.mlp(batch=4), {"input": feeds_for((4, 784))})
    assert [c.op for c in graph.calls()] == [
        "matmul",
        "add",
        "relu",
        "matmul",
        "add",
        "relu",
        "matmul",
        "add",
    ]


@pytest.mark.parametrize("key", sorted(REAL_MODELS))
def test_real_exported_models(key: str) -> None:
    """Files as keras2onnx / paddle2onnx wrote them (NHWC transposes, PRelu, SAME pads, SE blocks,
    Shape-driven reshapes); MTCNN's opset 12 is converted to 13 first."""
    spec = REAL_MODELS[key]
    try:
        model = spec.load(min_opset=SUPPORTED_OPSETS.start)
    except RegistryUnreachableError as exc:
        pytest.skip(f"package index unreachable: {exc}")
    rng = np.random.default_rng(0)
    feeds = {name: rng.uniform(-1, 1, shape).astype(np.float32) for name, shape in spec.shapes.items()}
    graph = check_against_ort(model, feeds, shapes=spec.shapes)
    assert not [c for c in graph.calls() if all(isinstance(a, Const) for a in c.args)]  # all folded
