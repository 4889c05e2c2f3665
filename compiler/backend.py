"""temper behind onnx's backend API, so the ONNX conformance suite (and any tool that speaks it) drives
the real compiler: `TemperBackend.prepare(model).run(inputs)` compiles with `compile_model` and runs the
artifact with `compiler.runtime`.

temper compiles for static shapes, while conformance models often leave dimensions open and pass
weights and shape operands (Reshape's shape, Slice's starts, Conv's weight, ...) as graph inputs. A
deployed model carries those as constants, so the backend does what a deployment would: compilation
waits for the first `run`, binds every dynamic input dimension to the array it was given, and freezes
inputs that feed a parameter or shape slot (`FROZEN_SLOTS`) into initializers. Each distinct signature
(shapes, dtypes, frozen values) is compiled once and cached on the rep.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

if TYPE_CHECKING:
    from compiler.runtime import Module

FROZEN_SLOTS: dict[str, tuple[int, ...]] = {
    # Parameters: real exports store these as initializers; temper folds and pre-packs them at compile time.
    "Conv": (1, 2),
    "ConvTranspose": (1, 2),
    "Gemm": (1, 2),
    "BatchNormalization": (1, 2, 3, 4),
    "LayerNormalization": (1, 2),
    "PRelu": (1,),
    # Recurrent layers: weights, biases and peepholes are parameters; sequence_lens decides how many
    # steps are unrolled (initial states stay inputs).
    "LSTM": (1, 2, 3, 4, 7),
    "GRU": (1, 2, 3, 4),
    "RNN": (1, 2, 3, 4),
    # Shape operands: their values decide output shapes, which temper must know when compiling.
    "Reshape": (1,),
    "Expand": (1,),
    "ConstantOfShape": (0,),
    "Slice": (1, 2, 3, 4),
    "Split": (1,),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
    "Pad": (1, 2, 3),
    "Resize": (1, 2, 3),
    "Col2Im": (1, 2),
    "AffineGrid": (1,),
    "ReduceMean": (1,),
    "ReduceSum": (1,),
    "ReduceMax": (1,),
    "ReduceProd": (1,),
    "ReduceLogSum": (1,),
    "ReduceLogSumExp": (1,),
    # An axis operand decides which loops the kernel has.
    "CumProd": (1,),
    # Scalar attributes passed as inputs since opset 11/12: constants in every real model.
    "Clip": (1, 2),
    "Dropout": (1, 2),
}
"""op type -> input positions the backend freezes into initializers when they are fed as graph inputs."""

_RUNNER_KWARGS = frozenset({"rtol", "atol"})
"""Keywords onnx's test runner forwards to prepare() that are about checking, not compiling."""


class TemperBackendRep(BackendRep):
    """A model prepared for temper: compiled lazily per input signature, run with the temper runtime."""

    def __init__(self, model: onnx.ModelProto, *, target: str, opt_level: int) -> None:
        self._model = model
        self._target = target
        self._opt_level = opt_level
        initializers = {init.name for init in model.graph.initializer}
        self._inputs = tuple(v for v in model.graph.input if v.name not in initializers)
        self._output_names = tuple(v.name for v in model.graph.output)
        self._frozen = _frozen_inputs(model, {v.name for v in self._inputs})
        self._compiled: dict[str, Module] = {}

    @property
    def input_names(self) -> tuple[str, ...]:
        """The runtime inputs, in the order positional inputs are matched to them."""
        return tuple(v.name for v in self._inputs)

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run on `inputs` (a sequence in graph-input order, a mapping by name, or one array);
        return the outputs in graph order, also addressable by name."""
        if kwargs:
            raise TypeError(f"unexpected keyword arguments: {', '.join(sorted(kwargs))}")
        feeds = self._feeds(inputs)
        module = self._module_for(feeds)
        results = module.run({name: array for name, array in feeds.items() if name not in self._frozen})
        return namedtupledict("Outputs", self._output_names)(*(results[name] for name in self._output_names))

    def _feeds(self, inputs: Any) -> dict[str, np.ndarray]:
        names = self.input_names
        if isinstance(inputs, Mapping):
            missing = [n for n in names if n not in inputs]
            unknown = [n for n in inputs if n not in names]
            if missing or unknown:
                raise ValueError(
                    f"inputs must be exactly {list(names)}: missing {missing}, unknown {unknown}"
                )
            return {name: np.asarray(inputs[name]) for name in names}
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if not isinstance(inputs, Sequence) or len(inputs) != len(names):
            count = len(inputs) if isinstance(inputs, Sequence) else 1
            raise ValueError(f"the model takes {len(names)} input(s) {list(names)}, got {count}")
        return {name: np.asarray(array) for name, array in zip(names, inputs, strict=True)}

    def _module_for(self, feeds: Mapping[str, np.ndarray]) -> Module:
        key = _signature(feeds, self._frozen)
        module = self._compiled.get(key)
        if module is None:
            module = self._compile(feeds)
            self._compiled[key] = module
        return module

    def _compile(self, feeds: Mapping[str, np.ndarray]) -> Module:
        # Imported here so that onnx's test machinery can import this module before the pipeline exists.
        import compiler.runtime
        from compiler.pipeline import CompileOptions, compile_model

        model = _freeze(self._model, {name: feeds[name] for name in self._frozen})
        shapes = {
            value.name: tuple(feeds[value.name].shape)
            for value in self._inputs
            if value.name not in self._frozen and not _is_static(value)
        }
        options = CompileOptions(target=self._target, opt_level=self._opt_level, shapes=shapes)
        compiled = compile_model(model.SerializeToString(), options)
        with tempfile.TemporaryDirectory(prefix="temper-backend-") as tmp:
            path = Path(tmp) / "model.temper"
            compiled.save(path)  # returns the artifact's sha256
            return compiler.runtime.load(path)


class TemperBackend(Backend):
    """onnx.backend.base.Backend for temper (CPU only). Keywords for prepare: target, opt_level."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto | bytes, device: str = "CPU", **kwargs: Any) -> TemperBackendRep:
        if not cls.supports_device(device):
            raise ValueError(f"temper runs on CPU only, not on device {device!r}")
        if isinstance(model, bytes):
            model = onnx.load_from_string(model)
        options = {k: v for k, v in kwargs.items() if k not in _RUNNER_KWARGS}
        target = options.pop("target", "host")
        opt_level = options.pop("opt_level", 3)
        if options:
            raise TypeError(f"unexpected keyword arguments: {', '.join(sorted(options))}")
        super().prepare(model, device)  # onnx.checker
        return TemperBackendRep(model, target=str(target), opt_level=int(opt_level))

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            on_cpu: bool = Device(device).type == DeviceType.CPU
        except AttributeError:  # an unknown device name
            return False
        return on_cpu


def _is_static(value: onnx.ValueInfoProto) -> bool:
    tensor = value.type.tensor_type
    return tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim)


def _frozen_inputs(model: onnx.ModelProto, runtime_inputs: set[str]) -> frozenset[str]:
    frozen = set()
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        for index in FROZEN_SLOTS.get(node.op_type, ()):
            if index < len(node.input) and node.input[index] in runtime_inputs:
                frozen.add(node.input[index])
    return frozenset(frozen)


def _signature(feeds: Mapping[str, np.ndarray], frozen: frozenset[str]) -> str:
    """What a compiled module depends on: every input's shape and dtype, and the frozen inputs' values."""
    digest = hashlib.sha256()
    for name, array in sorted(feeds.items()):
        digest.update(f"{name}:{array.dtype.str}:{array.shape};".encode())
        if name in frozen:
            digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _freeze(model: onnx.ModelProto, values: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of `model` whose inputs named in `values` are initializers holding those values."""
    if not values:
        return model
    frozen = onnx.ModelProto()
    frozen.CopyFrom(model)
    kept = [v for v in frozen.graph.input if v.name not in values]
    del frozen.graph.input[:]
    frozen.graph.input.extend(kept)
    frozen.graph.initializer.extend(numpy_helper.from_array(array, name) for name, array in values.items())
    return frozen
