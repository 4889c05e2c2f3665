"""The steps of an 8-bit integer conv, summed exactly in int32. DOT4: four uint8 values times the four
signed bytes of an int32; with the target's VNNI at the vector's width it is one vpdpbusd (the four
adjacent bytes loaded as one broadcast int32); without VNNI, DOT4_PAIRS_FIT (weights whose pairs
cannot saturate int16) is vpmaddubsw then vpmaddwd. DOT2: two int16 values times the two int16
halves of an int32, one vpmaddwd. Elsewhere the products are spelled out. All agree with numpy's
integers at the extremes of both operands, vectorized and scalar."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from compiler.codegen.library import CodeLibrary
from compiler.target import Target, host_target, parse_target
from compiler.tir import compute as te
from compiler.tir.flatten import flatten
from compiler.tir.ir import DOT2, DOT4, Call, IntImm, int_dot
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
    rows: int, quads: int, lanes: int, vector: bool, pairs_fit: bool = False, dtype: str = "uint8"
) -> tuple[object, int]:
    """out[i, o] = sum_q dot(x[i, wq..wq+w-1], w[q, o]) over `lanes` output lanes, the lanes
    vectorized: w = 4 uint8 x (DOT4) or 2 int16 x (DOT2)."""
    width = 4 if dtype == "uint8" else 2
    with te.tensor_scope():
        x = te.placeholder((rows, width * quads), dtype, "x")
        w = te.placeholder((quads, lanes), "int32", "w")
        q = te.reduce_axis(quads, "q")

        def body(i, o):  # type: ignore[no-untyped-def]
            xs = [x[i, te.add(te.mul(q.var, te.idx(width)), te.idx(k))] for k in range(width)]
            return te.reduce_sum(int_dot(xs, w[q.var, o], pairs_fit), [q])

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


def _instructions(target: Target, pairs_fit: bool, dtype: str = "uint8") -> set[str]:
    lanes = target.lanes("int32")
    func, _ = _dot_kernel(2, 8, lanes, vector=True, pairs_fit=pairs_fit, dtype=dtype)
    lib = CodeLibrary(target)
    lib.add_kernel(flatten(func), "kernel")  # type: ignore[arg-type]
    code = lib.llvm_ir()
    names = {
        "vpdpbusd": ("vpdpbusd",),
        "vpmaddubsw": ("pmadd.ub.sw", "pmaddubs.w.512"),
        "vpmaddwd": ("pmadd.wd", "pmaddw.d.512"),
    }
    return {i for i, spelled in names.items() if any(s in code for s in spelled)}


def test_dot4_is_one_vnni_instruction_where_the_target_has_it() -> None:
    host = host_target()
    has_vnni = host.dot_instructions.get(host.lanes("int32")) == "vpdpbusd"
    assert _instructions(host, pairs_fit=False) == ({"vpdpbusd"} if has_vnni else set())
    assert _instructions(host, pairs_fit=False, dtype="int16") == {"vpmaddwd"}


def test_without_vnni_only_weights_whose_pairs_fit_take_vpmaddubsw() -> None:
    plain = _without_vnni(host_target())
    assert _instructions(plain, pairs_fit=False) == set()  # 8-bit pairs would saturate: spelled out
    assert _instructions(plain, pairs_fit=True) == {"vpmaddubsw", "vpmaddwd"}  # the pairs widened by ones
    assert _instructions(plain, pairs_fit=False, dtype="int16") == {"vpmaddwd"}  # 8-bit weights: exact
    named = parse_target("x86-64-v3")  # an AVX2 CPU by name: no VNNI whatever the host has
    assert named.dot_instructions == {8: "vpmaddubsw"}
    assert _instructions(named, pairs_fit=True) == {"vpmaddubsw", "vpmaddwd"}
    assert _instructions(named, pairs_fit=False, dtype="int16") == {"vpmaddwd"}


@pytest.mark.parametrize("vector", [True, False], ids=["vector", "scalar"])
@pytest.mark.parametrize("name,target", _targets(), ids=[n for n, _ in _targets()])
def test_dot2_sums_int16_pairs_exactly(name: str, target: Target, vector: bool) -> None:
    """8-bit values widened (0..255 times -128..127, as the conv uses it) and int16's extremes: each
    product and each pair's sum within int32 (no x is -32768)."""
    rng = np.random.default_rng(6)
    lanes = target.lanes("int32")
    rows, pairs = 4, 29
    x = rng.integers(0, 256, (rows, 2 * pairs)).astype(np.int16)
    w16 = rng.integers(-128, 128, (pairs, lanes, 2)).astype(np.int16)
    x[1], w16[0] = 32767, -32768  # the largest products of either sign, pair after pair
    x[2], w16[1] = -32767, 32767
    x[3, :2] = (-32767, 255)
    func, _ = _dot_kernel(rows, pairs, lanes, vector, dtype="int16")
    out = np.zeros((rows, lanes), np.int32)
    run_func(func, x, np.ascontiguousarray(w16).view("<i4").reshape(pairs, lanes), out, target=target)  # type: ignore[arg-type]
    sums = np.einsum("iqk,qok->ioq", x.reshape(rows, pairs, 2).astype(np.int64), w16.astype(np.int64))
    assert np.abs(sums).max() >= 2**31 - 2**16  # a pair's sum at int32's edge
    want = sums.sum(axis=2)
    assert np.abs(want).max() < 2**31
    np.testing.assert_array_equal(out, want)


def test_a_dot_step_takes_four_uint8_or_two_int16_values_and_packed_weights() -> None:
    with te.tensor_scope():
        x = te.placeholder((4,), "float32", "x")
        w = te.placeholder((1,), "int32", "w")
        with pytest.raises(ValueError, match="four uint8 or two int16"):
            int_dot([x[te.idx(k)] for k in range(4)], w[te.idx(0)])
        halves = te.placeholder((4,), "int16", "h")
        with pytest.raises(ValueError, match="four uint8 or two int16"):
            int_dot([halves[te.idx(k)] for k in range(4)], w[te.idx(0)])
        assert int_dot([halves[te.idx(k)] for k in range(2)], w[te.idx(0)]).name == DOT2
        with pytest.raises(ValueError, match="int32"):
            int_dot([halves[te.idx(k)] for k in range(2)], halves[te.idx(0)])
    assert Call(DOT4, (IntImm(0, "uint8"),) * 4 + (IntImm(0, "int32"),), "int32").dtype == "int32"
