"""DOT4, the step of an 8-bit integer conv: four uint8 values times the four signed bytes of an int32,
summed exactly in int32. With the target's VNNI at the vector's width it is one vpdpbusd (the four
adjacent bytes loaded as one broadcast int32); without VNNI, DOT4_PAIRS_FIT (weights whose pairs
cannot saturate int16) is vpmaddubsw then vpmaddwd; elsewhere the products are spelled out. All
agree with numpy's integers at the extremes of both operands, vectorized and scalar."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from compiler.codegen.library import CodeLibrary
from compiler.target import Target, host_target, parse_target
from compiler.tir import compute as te
from compiler.tir.flatten import flatten
from compiler.tir.ir import DOT4, Call, IntImm, dot4
from compiler.tir.lower import lower
from compiler.tir.rules import root_loops
from compiler.tir.trace import Schedule
from tests.compiler.tir.kernels import run_func


def _without_vnni(target: Target) -> Target:
    features = ",".join(
        f"-{f[1:]}" if f in ("+avx512vnni", "+avxvnni") else f for f in target.features.split(",")
    )
    return dataclasses.replace(target, features=features)


def _targets() -> list[tuple[str, Target]]:
    host = host_target()
    cases = [("without_vnni", _without_vnni(host))]
    if "vpdpbusd" in host.dot_instructions.values():
        cases.append(("vnni", host))
    return cases


def _dot_kernel(
    rows: int, quads: int, lanes: int, vector: bool, pairs_fit: bool = False
) -> tuple[object, int]:
    """out[i, o] = sum_q dot4(x[i, 4q..4q+3], w[q, o]) over `lanes` output lanes, the lanes vectorized."""
    with te.tensor_scope():
        x = te.placeholder((rows, 4 * quads), "uint8", "x")
        w = te.placeholder((quads, lanes), "int32", "w")
        q = te.reduce_axis(quads, "q")

        def body(i, o):  # type: ignore[no-untyped-def]
            xs = [x[i, te.add(te.mul(q.var, te.idx(4)), te.idx(k))] for k in range(4)]
            return te.reduce_sum(dot4(xs, w[q.var, o], pairs_fit), [q])

        out = te.compute((rows, lanes), body, "dot", axis_names=["i", "o"], dtype="int32")
        func = lower("dot", [x, w], out)
    sch = Schedule(func)
    if vector:
        i, o, q = (f.var.name for f in root_loops(sch, "dot"))
        sch.reorder(i, q, o)
        sch.vectorize(o)
    return sch.func, lanes


def _operands(
    rng: np.random.Generator, rows: int, quads: int, lanes: int, bits: int = 8
) -> tuple[np.ndarray, np.ndarray]:
    half = 1 << (bits - 1)
    x = rng.integers(0, 256, (rows, 4 * quads)).astype(np.uint8)
    w8 = rng.integers(-half, half, (quads, lanes, 4)).astype(np.int8)
    x[0], w8[0] = 255, -half  # the extremes: the largest products of either sign
    w8[-1, :, :2] = half - 1
    return x, w8


@pytest.mark.parametrize("pairs_fit", [False, True], ids=["any_weights", "7_bit_weights"])
@pytest.mark.parametrize("vector", [True, False], ids=["vector", "scalar"])
@pytest.mark.parametrize("name,target", _targets(), ids=[n for n, _ in _targets()])
def test_dot4_sums_u8_times_s8_exactly(name: str, target: Target, vector: bool, pairs_fit: bool) -> None:
    rng = np.random.default_rng(5)
    lanes = target.lanes("int32")
    rows, quads = 3, 37
    x, w8 = _operands(rng, rows, quads, lanes, 7 if pairs_fit else 8)
    func, _ = _dot_kernel(rows, quads, lanes, vector, pairs_fit)
    out = np.zeros((rows, lanes), np.int32)
    run_func(func, x, np.ascontiguousarray(w8).view("<i4").reshape(quads, lanes), out, target=target)  # type: ignore[arg-type]
    want = np.einsum("iqk,qok->io", x.reshape(rows, quads, 4).astype(np.int64), w8.astype(np.int64))
    np.testing.assert_array_equal(out, want)


def _instructions(target: Target, pairs_fit: bool) -> set[str]:
    lanes = target.lanes("int32")
    func, _ = _dot_kernel(2, 8, lanes, vector=True, pairs_fit=pairs_fit)
    lib = CodeLibrary(target)
    lib.add_kernel(flatten(func), "kernel")  # type: ignore[arg-type]
    code = lib.llvm_ir()
    names = {"vpdpbusd": ("vpdpbusd",), "vpmaddubsw": ("pmadd.ub.sw", "pmaddubs.w.512")}
    return {i for i, spelled in names.items() if any(s in code for s in spelled)}


def test_dot4_is_one_vnni_instruction_where_the_target_has_it() -> None:
    host = host_target()
    has_vnni = host.dot_instructions.get(host.lanes("int32")) == "vpdpbusd"
    assert _instructions(host, pairs_fit=False) == ({"vpdpbusd"} if has_vnni else set())


def test_without_vnni_only_weights_whose_pairs_fit_take_vpmaddubsw() -> None:
    plain = _without_vnni(host_target())
    assert _instructions(plain, pairs_fit=False) == set()  # 8-bit pairs would saturate: spelled out
    assert _instructions(plain, pairs_fit=True) == {"vpmaddubsw"}
    named = parse_target("x86-64-v3")  # an AVX2 CPU by name: no VNNI whatever the host has
    assert named.dot_instructions == {8: "vpmaddubsw"}
    assert _instructions(named, pairs_fit=True) == {"vpmaddubsw"}


def test_dot4_takes_four_uint8_values_and_packed_weights() -> None:
    with te.tensor_scope():
        x = te.placeholder((4,), "float32", "x")
        w = te.placeholder((1,), "int32", "w")
        with pytest.raises(ValueError, match=DOT4):
            dot4([x[te.idx(k)] for k in range(4)], w[te.idx(0)])
    assert Call(DOT4, (IntImm(0, "uint8"),) * 4 + (IntImm(0, "int32"),), "int32").dtype == "int32"
