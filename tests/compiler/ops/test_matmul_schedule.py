"""The matmul's default register tile: it fits the target's vector registers for any shape, a single
row gets a wide column tile, and of two tiles equally good by FMAs per load the one with more rows
(fewer bytes of the right-hand panel per FMA) is chosen."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import compiler.runtime
from compiler.ops.matmul import register_tile, tail_tile
from compiler.pipeline import CompileOptions, compile_model
from compiler.target import Target
from tests.compiler.frontend.onnx_check import single_op

AVX512 = Target("x86_64-unknown-linux-gnu", "sapphirerapids", "", 512, 2)
AVX2 = Target("x86_64-unknown-linux-gnu", "znver3", "", 256, 2)


@pytest.mark.parametrize("target", [AVX512, AVX2], ids=["avx512", "avx2"])
@pytest.mark.parametrize("seed", range(4))
def test_the_tile_fits_the_registers_for_any_shape(target: Target, seed: int) -> None:
    rng = np.random.default_rng(seed)
    lanes = target.lanes()
    for _ in range(50):
        rows, cols = int(rng.integers(1, 4000)), int(rng.integers(1, 5000))
        mt, nt = register_tile(target, rows, cols)
        vectors = -(-nt // lanes)
        assert 1 <= mt <= rows and 1 <= nt <= max(cols, lanes)
        assert mt * vectors + vectors + 1 <= target.vector_registers, (rows, cols, mt, nt)


@pytest.mark.parametrize("target", [AVX512, AVX2], ids=["avx512", "avx2"])
def test_a_single_row_gets_a_wide_column_tile(target: Target) -> None:
    mt, nt = register_tile(target, 1, 1000)
    assert mt == 1 and nt >= 4 * target.lanes()


def test_between_tiles_as_good_the_one_with_more_rows_wins() -> None:
    """On AVX-512, 4 rows x 6 vectors and 6 rows x 4 vectors both do 24 FMAs per 10 loads; the
    6-row tile reads 4 panel vectors per step, not 6 (ViT's and BERT's 768-wide layers)."""
    for rows, cols in [(197, 768), (197, 3072), (128, 2304), (12, 768)]:
        assert register_tile(AVX512, rows, cols) == (6, 64)


ZEN4 = Target("x86_64-unknown-linux-gnu", "znver4", "", 512, 2)


@pytest.mark.parametrize("target", [AVX512, ZEN4, AVX2], ids=["avx512", "znver4", "avx2"])
@pytest.mark.parametrize(
    "rows,cols", [(197, 197), (199, 199), (1500, 1501), (256, 1001), (12, 131), (300, 203)]
)
def test_widths_no_column_tile_divides_get_several_rows_and_a_partial_last_tile(
    target: Target, rows: int, cols: int
) -> None:
    """Attention's score matmul at 197 tokens: no tile of 1-8 vectors divides the width. The tile
    keeps several rows (a single row loads a broadcast and a vector per FMA), its last column tile
    runs partly empty, it is at most half the width (an activation right-hand side is still copied
    into panels), and two registers stay spare."""
    mt, nt = register_tile(target, rows, cols)
    lanes = target.lanes()
    vectors = nt // lanes
    assert nt % lanes == 0 and 2 * nt <= cols
    assert mt > 1 and mt * vectors >= 4  # enough accumulators to cover the FMA latency
    assert mt * vectors + vectors + 3 <= target.vector_registers


def test_of_tail_tiles_the_one_wasting_fewest_cycles_wins() -> None:
    """On a core starting one 512-bit FMA per cycle every tile of four or more accumulators is FMA
    bound, so the fewest empty lanes decide: one vector wide for 197 columns (13 tiles, 11 empty
    lanes), not two (7 tiles, 27 empty)."""
    assert tail_tile(ZEN4, 197, 197)[1] == 16
    # two FMAs per cycle: one vector per row is bound by its loads, so rows share them longer
    mt, nt = tail_tile(AVX512, 197, 197)
    assert mt * (nt // 16) > 6


@pytest.mark.parametrize(
    ("k", "n", "parallel"), [(160, 320, "tiles"), (192, 768, "tiles"), (160, 160, "none")]
)
def test_a_single_row_against_weights_beyond_l1_runs_on_every_core(
    k: int, n: int, parallel: str, tmp_path: Path
) -> None:
    """A recurrent cell's step (one row against a constant weight matrix) has too few FLOPs to be
    worth waking the other core for, unless its weights stream from L2: from a size on, each core
    streaming half of them wins. The split kernel computes what numpy does."""
    rng = np.random.default_rng(k + n)
    x = rng.standard_normal((1, k), dtype=np.float32)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    model, feeds = single_op("MatMul", {"x": x}, {"w": w})
    compiled = compile_model(model.SerializeToString(), CompileOptions())
    (kernel,) = [kr for kr in compiled.kernels if kr.workload.anchor_op == "matmul"]
    assert dict(kernel.trace.decisions)["parallel"] == parallel
    compiled.save(tmp_path / "m.temper")
    got = compiler.runtime.load(tmp_path / "m.temper").run(feeds)["y0"]
    np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-4)
