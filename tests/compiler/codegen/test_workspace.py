"""The kernels' workspace memory (compiler/codegen/workspace.c) and kernels that share code.

The cache policy is checked on workspace.c compiled alone with its functions visible; the rest
through real compiled models: a kernel with large scratch buffers (a Winograd conv) gives the same
results call after call, its library exports only the release entry, and identical kernels of one
model are compiled once.
"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.codegen.library import RUNTIME_SOURCES, _c_compiler
from compiler.pipeline import CompileOptions, compile_model
from compiler.runtime import load
from compiler.runtime.errors import OUT_OF_MEMORY, KernelError
from compiler.target import parse_target
from tests.compiler.frontend.onnx_check import run_ort

WORKSPACE = next(s for s in RUNTIME_SOURCES if s.name == "workspace.c")


@pytest.fixture(scope="module")
def allocator(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    so = tmp_path_factory.mktemp("workspace") / "workspace.so"
    # hidden visibility left off, so that the test can call what kernels call
    subprocess.run(
        [_c_compiler(), "-std=c11", "-O2", "-fPIC", "-shared", "-pthread", str(WORKSPACE), "-o", str(so)],
        check=True,
    )
    lib = ctypes.CDLL(str(so))
    lib.temper_workspace_alloc.restype = ctypes.c_void_p
    lib.temper_workspace_alloc.argtypes = [ctypes.c_int64]
    lib.temper_workspace_free.restype = None
    lib.temper_workspace_free.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.temper_workspace_release.restype = None
    return lib


def test_freed_blocks_are_handed_out_again_best_fit(allocator: ctypes.CDLL) -> None:
    alloc, free = allocator.temper_workspace_alloc, allocator.temper_workspace_free
    small, large = alloc(1 << 16), alloc(1 << 22)
    assert small % 64 == 0 and large % 64 == 0 and small != large
    free(small, 1 << 16)
    free(large, 1 << 22)
    assert alloc(1 << 22) == large  # the same size again: the same block, no fresh pages
    assert alloc(1 << 12) == small  # the smallest block that is large enough
    third = alloc(1 << 20)
    assert third not in (small, large)  # nothing cached fits: a new block
    for p, n in ((small, 1 << 12), (large, 1 << 22), (third, 1 << 20)):
        free(p, n)
    allocator.temper_workspace_release()
    assert alloc(1 << 12) not in (None, 0)  # after a release: fresh blocks, still usable


def test_the_cache_keeps_a_bounded_number_of_blocks(allocator: ctypes.CDLL) -> None:
    alloc, free = allocator.temper_workspace_alloc, allocator.temper_workspace_free
    allocator.temper_workspace_release()
    blocks = [alloc(4096 * (k + 1)) for k in range(40)]
    for k, p in enumerate(blocks):
        free(p, 4096 * (k + 1))
    # the largest ones were kept: asking for them again reuses them
    assert alloc(4096 * 40) in blocks and alloc(4096 * 39) in blocks
    allocator.temper_workspace_release()


def _winograd_block(c: int, hw: int) -> tuple[bytes, dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    weights = [(rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32) for _ in range(3)]
    nodes = [
        helper.make_node("Conv", [src, f"w{k}"], [f"c{k}"], pads=[1, 1, 1, 1], name=f"conv{k}")
        for k, src in enumerate(["x", "r0", "r1"])
    ]
    nodes[1:1] = [helper.make_node("Relu", ["c0"], ["r0"], name="relu0")]
    nodes[3:3] = [helper.make_node("Relu", ["c1"], ["r1"], name="relu1")]
    shape = [1, c, hw, hw]
    graph = helper.make_graph(
        nodes,
        "three_convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("c2", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(w, f"w{k}") for k, w in enumerate(weights)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString(), {"x": rng.standard_normal(shape).astype(np.float32)}


def test_kernels_with_scratch_buffers_repeat_exactly_and_identical_kernels_share_code(tmp_path: Path) -> None:
    c = max(32, 2 * parse_target("host").lanes())  # enough channels for Winograd on any vector width
    data, feeds = _winograd_block(c, 20)
    compiled = compile_model(data, CompileOptions())
    assert len(compiled.manifest["conv_algorithms"]["winograd"]) == 3
    # conv0 and conv1 (each + relu) are the same kernel with other weights: compiled once
    convs = [k for k in compiled.kernels if "winograd" in k.name]
    assert [k.same_as for k in convs] == [None, convs[0].symbol, None]
    assert convs[0].workload.key == convs[1].workload.key != convs[2].workload.key
    compiled.save(tmp_path / "m.temper")
    module = load(tmp_path / "m.temper")
    want = run_ort_bytes(data, feeds)
    first = module.run(feeds)["c2"]
    np.testing.assert_allclose(first, want, rtol=1e-4, atol=1e-4)
    for _ in range(3):
        np.testing.assert_array_equal(module.run(feeds)["c2"], first)
    library = _library(tmp_path, compiled.library)
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True)
    exported = {line.split()[-1] for line in symbols.stdout.splitlines()}
    assert {k.symbol for k in compiled.kernels} <= exported
    assert "temper_workspace_release" in exported and "temper_workspace_alloc" not in exported


def test_a_kernel_out_of_workspace_memory_says_so() -> None:
    assert "out of memory for its workspace" in str(KernelError("k", 3, OUT_OF_MEMORY))
    assert str(KernelError("k", 3, 7)).endswith("error code 7")


def run_ort_bytes(data: bytes, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import onnx

    return next(iter(run_ort(onnx.load_from_string(data), feeds).values()))


def _library(tmp_path: Path, library: bytes) -> Path:
    path = tmp_path / "lib.so"
    path.write_bytes(library)
    return path


def test_a_local_buffer_too_large_for_a_stack_is_refused() -> None:
    """A `local` buffer lives on the running thread's stack: one past MAX_STACK_BUFFER_BYTES is a
    CodegenError naming it, not a crash at run time; a register-sized one compiles."""
    from compiler.codegen.library import CodeLibrary
    from compiler.codegen.llvm import MAX_STACK_BUFFER_BYTES
    from compiler.errors import CodegenError
    from compiler.target import host_target
    from compiler.tir.flatten import flatten
    from compiler.tir.trace import Schedule
    from tests.compiler.tir.kernels import matmul_relu

    side = 1024  # C is side x side floats, all of it touched at the root: 4 MiB
    assert side * side * 4 > MAX_STACK_BUFFER_BYTES
    sch = Schedule(matmul_relu(side, side, 4))
    sch.set_scope("C", "local")
    with pytest.raises(CodegenError, match=r"local buffer C of \d+ bytes exceeds"):
        CodeLibrary(host_target()).add_kernel(flatten(sch.func), "kernel")
    small = Schedule(matmul_relu(8, 8, 4))
    small.set_scope("C", "local")
    CodeLibrary(host_target()).add_kernel(flatten(small.func), "kernel")
