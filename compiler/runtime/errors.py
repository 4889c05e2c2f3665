"""The runtime's own errors, kept here (stdlib only) so an artifact loads without the compiler."""

from __future__ import annotations


class ArtifactError(Exception):
    """An artifact is corrupt, tampered with, inconsistent, or of an unknown format version."""


class InputError(ValueError):
    """Inputs passed to a loaded artifact do not match its signature (name, shape or dtype)."""


# the non-zero codes a kernel returns (compiler/codegen/llvm.py emits them)
OUT_OF_MEMORY = 1
_MEANING = {OUT_OF_MEMORY: "out of memory for its workspace"}


class KernelError(RuntimeError):
    """A kernel of a loaded artifact returned a non-zero error code."""

    def __init__(self, kernel: str, step: int, code: int) -> None:
        self.kernel = kernel
        self.step = step
        self.code = code
        meaning = f" ({_MEANING[code]})" if code in _MEANING else ""
        super().__init__(f"kernel {kernel!r} (plan step {step}) failed with error code {code}{meaning}")
