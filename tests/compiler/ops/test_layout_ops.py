"""The blocked-layout ops: layout_transform and conv2d_nchwc (shape rules, errors, packing)."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.errors import ShapeError
from compiler.ops.conv2d_blocked import pack_weight, unpack_weight
from compiler.ops.layout import layout_block, to_blocked, to_planar
from compiler.ops.registry import get
from compiler.tensor_type import TensorType

CONV = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "groups": 1}


def test_layouts_and_packing_round_trip(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 24, 5, 7)).astype(np.float32)
    assert layout_block("NCHW") == 0 and layout_block("NCHW16c") == 16
    np.testing.assert_array_equal(to_planar(to_blocked(x, 8)), x)
    assert to_blocked(x, 8)[1, 2, 3, 4, 5] == x[1, 2 * 8 + 5, 3, 4]
    odd = rng.standard_normal((1, 12, 3, 2)).astype(np.float32)
    padded = to_blocked(odd, 8)
    assert padded.shape == (1, 2, 3, 2, 8) and not padded[:, 1, :, :, 4:].any()
    np.testing.assert_array_equal(to_planar(padded, 12), odd)
    attrs = {"src_layout": "NCHW", "dst_layout": "NCHW8c"}
    assert get("layout_transform").infer([TensorType((1, 12, 3, 2), "float32")], attrs).shape == (
        1,
        2,
        3,
        2,
        8,
    )
    w = rng.standard_normal((16, 24, 3, 3)).astype(np.float32)
    np.testing.assert_array_equal(unpack_weight(pack_weight(w, 8, 8)), w)
    assert pack_weight(w, 8, 8)[1, 2, 0, 1, 3, 4] == w[1 * 8 + 4, 2 * 8 + 3, 0, 1]
    # output and input channels that do not fill blocks get zero weights
    packed = pack_weight(w[:12, :20], 8, 8)
    assert packed.shape == (2, 3, 3, 3, 8, 8) and not packed[1, :, :, :, :, 4:].any()
    np.testing.assert_array_equal(unpack_weight(packed)[:12, :20], w[:12, :20])


@pytest.mark.parametrize(
    ("types", "attrs", "message"),
    [
        (
            [(1, 2, 4, 4, 8)],
            {"src_layout": "NCHW8c", "dst_layout": "NCHW", "channels": 5},
            "5 channels do not fill 2",
        ),
        ([(1, 12, 4)], {"src_layout": "NCHW", "dst_layout": "NCHW8c"}, "needs a 4-D NCHW input"),
        ([(1, 16, 4, 4)], {"src_layout": "NCHW", "dst_layout": "NHWC"}, "unknown layout 'NHWC'"),
        ([(1, 16, 4, 4)], {"src_layout": "NCHW", "dst_layout": "NCHW"}, "between NCHW and NCHW<b>c"),
        ([(1, 2, 4, 4, 4)], {"src_layout": "NCHW8c", "dst_layout": "NCHW"}, "inner axis 8"),
    ],
)
def test_layout_transform_refuses_what_it_cannot_convert(types, attrs, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ShapeError, match=message):
        get("layout_transform").infer([TensorType(t, "float32") for t in types], attrs)


def test_conv2d_nchwc_refuses_mismatched_blocks() -> None:
    attrs = dict(CONV)
    x, w = TensorType((1, 2, 6, 6, 8), "float32"), TensorType((2, 2, 3, 3, 4, 8), "float32")
    with pytest.raises(
        ShapeError, match=r"input \[1, 2, 6, 6, 8\], weight \[2, 2, 3, 3, 4, 8\] do not match"
    ):
        get("conv2d_nchwc").infer([x, w], attrs)
    with pytest.raises(ShapeError, match="5-D input and a 6-D weight"):
        get("conv2d_nchwc").infer([TensorType((1, 16, 6, 6), "float32"), w], attrs)
