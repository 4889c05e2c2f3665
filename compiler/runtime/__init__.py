"""temper's runtime: the artifact format and its loader.

Needs only numpy, ctypes and the standard library, so a compiled model runs anywhere:

    from compiler.runtime import load
    module = load("model.temper")
    outputs = module.run({"input": x})
"""

from compiler.runtime.archive import (
    FORMAT_VERSION,
    Contents,
    artifact_bytes,
    read_artifact,
    read_contents,
    sign_artifact,
    write_artifact,
)
from compiler.runtime.errors import ArtifactError, InputError, KernelError
from compiler.runtime.module import Module, load
from compiler.runtime.plan import DTYPES, PARAM_ALIGN, TensorSpec

__all__ = [
    "DTYPES",
    "FORMAT_VERSION",
    "PARAM_ALIGN",
    "ArtifactError",
    "Contents",
    "InputError",
    "KernelError",
    "Module",
    "TensorSpec",
    "artifact_bytes",
    "load",
    "read_artifact",
    "read_contents",
    "sign_artifact",
    "write_artifact",
]
