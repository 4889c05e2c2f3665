"""A register tile whose last column vector is partly past the output's width (attention scores
at 50 or 77 tokens take one tile over the whole width): its accumulators stay in vector registers,
the switched-off lanes computed and discarded, and only the stores to the output are masked. A
masked store into the tile's memory would pin every accumulator of the tile on the stack."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import compiler.runtime
from compiler.kernels import ScheduleChoice, default_schedule
from compiler.pipeline import CompileOptions, compile_model
from compiler.target import parse_target

# a full-width vector register read from or written to the stack: a spill, or a tile in memory
_STACK_VECTOR = re.compile(r"[yz]mm\d+.*\(%r[sb]p\)|\(%r[sb]p\).*[yz]mm\d+")
_LABEL = re.compile(r"^(\.LBB\w+):")
_BACK_EDGE = re.compile(r"^\s+j\w+\s+(\.LBB\w+)$")


def _fma_loops(asm: list[str]) -> list[list[str]]:
    """The bodies of the innermost loops (a label to a later jump back to it, no other label in
    between) that hold FMAs: the reduction over k of a register tile."""
    at: dict[str, int] = {}
    loops = []
    for n, line in enumerate(asm):
        label = _LABEL.match(line)
        if label:
            at[label.group(1)] = n
        jump = _BACK_EDGE.match(line)
        if jump and jump.group(1) in at:
            body = asm[at[jump.group(1)] : n + 1]
            if any("vfmadd" in x for x in body) and sum(bool(_LABEL.match(x)) for x in body) == 1:
                loops.append(body)
    return loops


class _Forced:
    def __init__(self, force: dict[str, Any]) -> None:
        self.force = force

    def choose(self, name: str, options: Any, default: Any) -> Any:
        return self.force.get(name, default)


def _scores(batch: int, tokens: int, dim: int) -> bytes:
    a = helper.make_tensor_value_info("q", TensorProto.FLOAT, [batch, tokens, dim])
    b = helper.make_tensor_value_info("k", TensorProto.FLOAT, [batch, dim, tokens])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, tokens, tokens])
    node = helper.make_node("MatMul", ["q", "k"], ["y"], name="node")
    graph = helper.make_graph([node], "scores", [a, b], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _compiled(data: bytes, target: str, force: dict[str, Any], dump: Path) -> Any:
    plain = compile_model(data, CompileOptions(target=target))
    if not force:
        return compile_model(data, CompileOptions(target=target, dump_ir=str(dump)))
    (kernel,) = [k for k in plain.kernels if k.workload.anchor_op == "matmul"]
    sch, _ = default_schedule(kernel.workload, _Forced(force))
    choice = ScheduleChoice(sch.trace, {"source": "override"})
    return compile_model(data, CompileOptions(target=target, overrides={"node": choice}, dump_ir=str(dump)))


def _partial_lanes(compiled: Any, tokens: int, lanes: int) -> int:
    (kernel,) = [k for k in compiled.kernels if k.workload.anchor_op == "matmul"]
    nt = dict(kernel.trace.decisions)["nt"]
    return (tokens % nt or nt) % lanes


@pytest.mark.parametrize("target", ["host", "znver3", "znver4", "sapphirerapids"])
@pytest.mark.parametrize(
    ("tokens", "dim", "force"),
    [(50, 64, {}), (77, 64, {}), (49, 32, {}), (50, 64, {"nt": 32, "mt": 6}), (77, 64, {"nt": 48})],
)
def test_a_partial_column_vector_keeps_the_tile_in_registers(
    target: str, tokens: int, dim: int, force: dict[str, Any], tmp_path: Path
) -> None:
    """The kernel's code (for the host and for other x86 targets, not run there) moves no vector
    between registers and the stack in its reduction loops, and the tile does have a partial last vector."""
    if force.get("nt") == 48 and parse_target(target).vector_bits < 512:
        pytest.skip(
            "on AVX2 a lane mask takes a vector register: six vectors of a row tile, their masks made "
            "from 64-bit lane indices and the panel's loads outgrow the sixteen registers"
        )
    compiled = _compiled(_scores(2, tokens, dim), target, force, tmp_path)
    assert _partial_lanes(compiled, tokens, parse_target(target).lanes()) > 0
    loops = _fma_loops((tmp_path / "module.s").read_text().splitlines())
    assert loops
    spilled = [line for body in loops for line in body if _STACK_VECTOR.search(line)]
    assert spilled == []


@pytest.mark.parametrize("tokens", [17, 50, 77, 49, 131])
@pytest.mark.parametrize("force", [{}, {"nt": 32, "mt": 6}, {"nt": 48, "mt": 3}, {"parallel": "tiles"}])
def test_partial_tiles_compute_the_scores(tokens: int, force: dict[str, Any], tmp_path: Path) -> None:
    """The switched-off lanes never reach the output, whatever the tile and the row tail."""
    rng = np.random.default_rng(tokens)
    q = rng.standard_normal((3, tokens, 40), dtype=np.float32)
    k = rng.standard_normal((3, 40, tokens), dtype=np.float32)
    compiled = _compiled(_scores(3, tokens, 40), "host", force, tmp_path / "ir")
    compiled.save(tmp_path / "m.temper")
    got = compiler.runtime.load(tmp_path / "m.temper").run({"q": q, "k": k})["y"]
    np.testing.assert_allclose(got, q @ k, rtol=1e-4, atol=1e-4)
