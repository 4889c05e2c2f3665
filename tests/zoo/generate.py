"""Make the zoo's ONNX files: export each network with the exporter, opset and axes its entry names.

    python -m tests.zoo.generate [--out DIR] NAME...

Writes DIR/NAME.onnx and DIR/NAME.npz (the inputs to test with) for each generated entry, each
published with an atomic rename, so an interrupted run leaves no half-written file and parallel runs
never clash. An export the exporter itself cannot make is written as DIR/NAME.error with its message.
Runs in a child process of the tests (torch stays out of the test process).
"""

from __future__ import annotations

import argparse
import inspect
import io
import os
import sys
import tempfile
import traceback
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from tests.zoo.catalog import DYNAMO, QUANTIZED, QUANTIZED_7BIT, ZOO, ZooModel

CACHE = Path(__file__).resolve().parents[2] / ".cache" / "zoo"
SEED = 0


def _publish(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def export(entry: ZooModel) -> tuple[bytes, dict[str, np.ndarray]]:
    """The ONNX file of `entry` and the inputs to test it with."""
    import torch

    from tests.zoo.networks import builders

    torch.set_num_threads(2)
    network = builders()[entry.network](SEED)
    names = list(network.inputs)
    args = tuple(network.inputs[name] for name in names)
    axes = network.dynamic_axes if entry.dynamic else None
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if entry.exporter == DYNAMO:
            program = torch.onnx.export(
                network.module,
                args,
                dynamo=True,
                opset_version=entry.opset,
                input_names=names,
                output_names=list(network.outputs),
                dynamic_shapes=_dynamic_shapes(network.module, names, axes),
                external_data=False,
                verbose=False,
            )
            assert program is not None
            program.save(buffer, external_data=False)
        else:
            torch.onnx.export(
                network.module,
                args,
                buffer,
                dynamo=False,
                opset_version=entry.opset,
                input_names=names,
                output_names=list(network.outputs),
                dynamic_axes=axes,
                do_constant_folding=True,
            )
    if entry.dynamic and network.test_inputs is not None:
        feeds = network.test_inputs
    else:
        feeds = {name: tensor.numpy() for name, tensor in network.inputs.items()}
    if entry.network.endswith((QUANTIZED, QUANTIZED_7BIT)):
        return quantize(buffer.getvalue(), feeds, entry.network.endswith(QUANTIZED_7BIT)), feeds
    return buffer.getvalue(), feeds


def quantize(model: bytes, feeds: dict[str, np.ndarray], reduce_range: bool = False) -> bytes:
    """The model quantized by onnxruntime's static quantization as its documentation shows it
    (pre-processed, QDQ format, uint8 activations, int8 weights per channel), calibrated on random
    batches shaped like `feeds` (their integer inputs, token ids, kept); with `reduce_range`, 7-bit
    weights, as onnxruntime advises for CPUs without VNNI."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Batches(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(SEED + 1)

            def one() -> dict[str, np.ndarray]:  # random floats; token ids and masks as given
                return {
                    k: rng.standard_normal(v.shape).astype(v.dtype) if v.dtype.kind == "f" else v
                    for k, v in feeds.items()
                }

            self.batches = iter([one() for _ in range(4)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    with tempfile.TemporaryDirectory() as tmp:
        plain, ready, quantized = (Path(tmp) / f"{n}.onnx" for n in ("plain", "ready", "quantized"))
        plain.write_bytes(model)
        quant_pre_process(str(plain), str(ready))
        quantize_static(
            str(ready),
            str(quantized),
            Batches(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            reduce_range=reduce_range,
        )
        return quantized.read_bytes()


def _dynamic_shapes(module: Any, names: list[str], axes: dict[str, dict[int, str]] | None) -> Any:
    """torch.export's form of dynamic axes: per positional input, its dynamic dims (for a module that
    takes `*args`, the specs of all of them are one tuple)."""
    if axes is None:
        return None
    from torch.export import Dim

    specs = tuple({dim: Dim.DYNAMIC for dim in axes.get(name, {})} for name in names)
    parameters = inspect.signature(module.forward).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return (specs,)
    return specs


def generate(name: str, out: Path = CACHE) -> None:
    entry = ZOO[name]
    try:
        model, feeds = export(entry)
    except Exception:  # the exporter's own failure: recorded for the test to report, never fatal here
        _publish(out / f"{name}.error", traceback.format_exc().encode())
        return
    inputs = io.BytesIO()
    np.savez(inputs, **feeds)
    _publish(out / f"{name}.npz", inputs.getvalue())
    _publish(out / f"{name}.onnx", model)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=CACHE)
    parser.add_argument("names", nargs="+", choices=sorted(ZOO))
    args = parser.parse_args(argv)
    for name in args.names:
        generate(name, args.out)
        print(name, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
