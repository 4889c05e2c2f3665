"""The matmul's default register tile: it fits the target's vector registers for any shape, a single
row gets a wide column tile, and of two tiles equally good by FMAs per load the one with more rows
(fewer bytes of the right-hand panel per FMA) is chosen."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.ops.matmul import register_tile
from compiler.target import Target

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
