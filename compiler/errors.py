"""The compiler's error tree: every user-facing failure names what went wrong and where."""

from __future__ import annotations


class CompilerError(Exception):
    """Base of every error the compiler reports to a user (never a bare stack trace)."""

    def __init__(self, message: str, *, node: str = "", op: str = "") -> None:
        self.node = node
        self.op = op
        where = ", ".join(p for p in (f"node {node!r}" if node else "", f"op {op}" if op else "") if p)
        super().__init__(f"{message} ({where})" if where else message)
        self.message = message

    def __reduce__(self) -> tuple[object, ...]:
        # as it is, whatever the subclass's constructor takes: errors cross process boundaries
        # (service.sandbox sends a child's typed error back to the request that asked)
        return _rebuild, (type(self), str(self), dict(self.__dict__))


def _rebuild(cls: type[CompilerError], text: str, state: dict[str, object]) -> CompilerError:
    error = cls.__new__(cls)
    Exception.__init__(error, text)
    error.__dict__.update(state)
    return error


class ModelError(CompilerError):
    """The model file itself is malformed (not ONNX, fails the checker, truncated)."""


class UnsupportedOpError(CompilerError):
    """One or more nodes use ops/opsets/dtypes temper does not support.

    `nodes` lists every offender as (node name, op type, opset) so the user sees them all at once.
    """

    def __init__(self, nodes: list[tuple[str, str, int]], detail: str = "") -> None:
        self.nodes = nodes
        lines = "; ".join(f"{name or '<unnamed>'} ({op}, opset {opset})" for name, op, opset in nodes)
        msg = f"{len(nodes)} unsupported node(s): {lines}"
        if detail:
            msg += f". {detail}"
        super().__init__(msg)


class ShapeError(CompilerError):
    """Shapes do not fit: unbound dynamic dimensions, mismatched inputs, bad attributes."""


class ScheduleError(CompilerError):
    """A schedule primitive or trace cannot be applied to this kernel."""


class UnknownNodeError(CompilerError):
    """A name given for a node or kernel (`--node`, `--kernel`) matches none of the model's.
    `closest` lists the model's names nearest to it."""

    def __init__(self, message: str, *, name: str = "", closest: tuple[str, ...] = ()) -> None:
        self.name = name
        self.closest = closest
        super().__init__(message)


class OverrideError(UnknownNodeError):
    """A schedule override names no ONNX node and no kernel of the model, or two overrides pin the
    same kernel."""


class CodegenError(CompilerError):
    """LLVM code generation, optimisation or linking failed."""


# The runtime owns these (it must not import the compiler); re-exported for one class each.
from compiler.runtime.errors import ArtifactError, InputError  # noqa: E402

__all__ = [
    "ArtifactError",
    "CodegenError",
    "CompilerError",
    "InputError",
    "ModelError",
    "OverrideError",
    "ScheduleError",
    "ShapeError",
    "UnknownNodeError",
    "UnsupportedOpError",
]
