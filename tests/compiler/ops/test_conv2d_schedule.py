"""The direct conv schedules: which rule of conv2d (depthwise_rows, columns_tile, channel_tile) and
of conv2d_nchwc (depthwise_columns, block_tile) each kind of conv gets, seen by the decisions the
rule asks for. Stored tuning records replay these decisions by name, so a kind moving to another
rule, or a rule asking for other decisions, shows here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.kernels import Workload, choose_rule
from compiler.ops.conv2d_blocked import (
    block_register_tile,
    depthwise_tile,
    ic_chunk,
    one_block_run,
    padded_tile,
    plane_chunk,
    plane_tile,
    register_tile,
    tile_order,
)
from compiler.ops.conv2d_winograd import MAX_CHUNK_BYTES, _tile_bytes, chunk_default, product_tile
from compiler.pipeline import CompileOptions, frontier_for
from compiler.target import parse_target


def _conv_model(
    c: int, oc: int, k: int, *, groups: int = 1, stride: int = 1, hw: int = 16, pointwise: bool = False
) -> bytes:
    """One padded ('same') conv followed by a relu (the fused epilogue); with `pointwise`, a dense 1x1
    conv after them, as MobileNet's blocks put one after a depthwise conv."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((oc, c // groups, k, k)).astype(np.float32)
    out = (hw + 2 * (k // 2) - k) // stride + 1
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "w"],
            ["c"],
            name="conv",
            kernel_shape=[k, k],
            strides=[stride] * 2,
            pads=[k // 2] * 4,
            group=groups,
        ),
        helper.make_node("Relu", ["c"], ["r" if pointwise else "y"], name="relu"),
    ]
    weights = [numpy_helper.from_array(w, "w")]
    if pointwise:
        nodes.append(helper.make_node("Conv", ["r", "pw"], ["y"], name="pointwise", kernel_shape=[1, 1]))
        weights.append(numpy_helper.from_array(rng.standard_normal((oc, oc, 1, 1)).astype(np.float32), "pw"))
    graph = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, oc, out, out])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def _conv_workload(model: bytes, disabled: set[str]) -> Workload:
    """The kernel of the model's node "conv", lowered for a fixed target (8 lanes, 16 vector
    registers)."""
    options = CompileOptions(target="haswell", disabled_passes=frozenset(disabled))
    fr = frontier_for(model, options, None)
    (w,) = [g.workload for g in fr.kernels if "conv" in g.workload.nodes]
    return w


class _Record:
    """Takes the defaults, or the values in `force`; records each decision asked for."""

    def __init__(self, force: dict[str, Any] | None = None) -> None:
        self.force = force or {}
        self.asked: dict[str, Any] = {}

    def choose(self, name: str, options: Sequence[Any], default: Any) -> Any:
        value = self.force.get(name, default)
        self.asked[name] = value
        return value


PLANAR = {"alter_layout"}
DEPTHWISE_ROWS = {"parallel", "vector_width", "rows", "pad_at"}
COLUMNS_TILE = {"parallel", "vector_axis", "oct"}
CHANNEL_TILE = {"parallel", "vector_axis", "nt", "owt", "reduce_order", "tile_order", "unroll_kw"}


@pytest.mark.parametrize(
    ("conv", "force", "asked"),
    [
        # depthwise_rows: a vector along output rows; no vector_axis to decide
        (dict(c=16, oc=16, k=3, groups=16), {}, DEPTHWISE_ROWS),
        (dict(c=16, oc=16, k=5, groups=16, stride=2, hw=32), {}, DEPTHWISE_ROWS),
        # columns_tile: grouped convs without a vector_axis decision, few channels by it
        (dict(c=32, oc=32, k=3, groups=4), {}, COLUMNS_TILE - {"vector_axis"}),
        (dict(c=16, oc=3, k=3), {}, COLUMNS_TILE),
        (dict(c=16, oc=32, k=3), {"vector_axis": "ow"}, COLUMNS_TILE),
        # channel_tile: whole vectors of output channels
        (dict(c=16, oc=32, k=3), {}, CHANNEL_TILE),
        (dict(c=3, oc=16, k=7, stride=2, hw=32), {}, CHANNEL_TILE),
    ],
)
def test_each_planar_conv_kind_gets_its_rule(
    conv: dict[str, int], force: dict[str, Any], asked: set[str]
) -> None:
    w = _conv_workload(_conv_model(**conv), PLANAR)
    assert w.anchor_op == "conv2d"
    dec = _Record(force)
    _, rule, fallback = choose_rule(w, dec)
    assert (rule, fallback) == ("conv2d", None)
    assert set(dec.asked) == asked
    if "vector_axis" in asked:
        assert dec.asked["vector_axis"] == ("ow" if "oct" in asked else "oc")


@pytest.mark.parametrize(
    ("conv", "asked"),
    [
        # depthwise_columns (a depthwise conv runs blocked in a chain with a dense conv)
        (dict(c=16, oc=16, k=3, groups=16, pointwise=True), {"parallel", "owt", "unroll_kw", "pad_at"}),
        # block_tile: the reduction in chunks (ic_chunk), else the tile order and unrolled lanes
        (
            dict(c=16, oc=32, k=3),
            {"parallel", "plane_tile", "nb", "owt", "ic_chunk", "tile_order", "unroll_ci"},
        ),
    ],
)
def test_each_blocked_conv_kind_gets_its_rule(conv: dict[str, int], asked: set[str]) -> None:
    w = _conv_workload(_conv_model(**conv), {"conv_algorithm"})
    assert w.anchor_op == "conv2d_nchwc"
    dec = _Record()
    _, rule, fallback = choose_rule(w, dec)
    assert (rule, fallback) == ("conv2d_nchwc", None)
    assert set(dec.asked) == asked


@pytest.mark.parametrize("target", ["haswell", "skylake-avx512"])
def test_register_tiles_fit_and_prime_rows_get_wide_tiles(target: str) -> None:
    """Every row width gets a tile that fits the registers with two to spare; a width with no good
    divisor (a prime such as 17 or 71, as Inception's planes have) gets a wide tile and a narrower
    last one instead of one column at a time; on 16 registers, a 7- or 14-column row (ResNet's last
    stages) takes two channel blocks, which halves the input values loaded per FMA, and a 56-column
    row keeps a tile that divides it."""
    t = parse_target(target)
    regs, lanes = t.vector_registers, t.lanes()
    for ow in range(1, 80):
        nb, owt = register_tile(t, 8, lanes, ow)
        assert nb * owt + nb + 3 <= regs and 1 <= owt <= ow, (ow, nb, owt)
    for prime in (17, 71, 73):
        nb, owt = register_tile(t, 8, lanes, prime)
        assert nb * owt >= 8 and prime % owt, (prime, nb, owt)
    if regs == 16:
        assert register_tile(t, 8, lanes, 7) == (2, 4) and register_tile(t, 8, lanes, 14) == (2, 5)
        nb, owt = register_tile(t, 8, lanes, 56)
        assert 56 % owt == 0 and nb * owt >= 8


@pytest.mark.parametrize("target", ["haswell", "skylake-avx512"])
def test_winograd_product_tiles_take_one_wider_tile_that_divides_the_tiles(target: str) -> None:
    """The products' register tile is the direct conv's, or one tile wider when that divides the
    tiles and the accumulators and weight vectors fit the registers (AVX-512: 14 tiles of 4 channel
    blocks take 7, no tile of 2 left over); never more registers than there are."""
    t = parse_target(target)
    regs, lanes = t.vector_registers, t.lanes()
    for tiles in range(1, 60):
        nb, pt = product_tile(t, 4, lanes, tiles)
        assert (nb, pt) == register_tile(t, 4, lanes, tiles) or (tiles % pt == 0 and (pt + 1) * nb <= regs)
    if regs == 32:
        assert register_tile(t, 4, lanes, 14) == (4, 6) and product_tile(t, 4, lanes, 14) == (4, 7)
        assert product_tile(t, 4, lanes, 16) == (4, 6)  # 7 does not divide 16


def test_winograd_chunks_count_every_image_of_a_batch() -> None:
    """The transformed tiles the three passes carry through memory are those of the whole batch: a
    video network's 3x3 convs over 8 folded frames (R(2+1)D's 192 -> 64 at 56x56, F(4x4) tiles) run
    in chunks of a whole tile row, where one frame keeps the three passes; F(2x2) and F(3x3) tiles
    count the batch against the weights the same way; convs whose weights outweigh the batch's
    tiles keep the passes."""
    # F(4x4) (alpha 6), 56x56 -> 14x14 tiles
    assert chunk_default(1, 192, 64, 14, 14, 6) == 0
    whole_row = chunk_default(8, 192, 64, 14, 14, 6)
    assert whole_row == 14 and whole_row * _tile_bytes(192, 64, 6) <= MAX_CHUNK_BYTES
    # 384 -> 128 at 28x28 over 4 frames: a tile row of 7
    assert chunk_default(4, 384, 128, 7, 7, 6) == 7
    # a row too wide for MAX_CHUNK_BYTES: its largest divisor that fits
    row = chunk_default(2, 512, 512, 14, 14, 6)
    assert 0 < row < 14 and 14 % row == 0 and row * _tile_bytes(512, 512, 6) <= MAX_CHUNK_BYTES
    # weights outweigh the batch's tiles (2 frames of 14x14 -> 5x5 F(3x3) tiles, 768 -> 256)
    assert chunk_default(2, 768, 256, 5, 5, 5) == 0
    # F(2x2): a plane whose one image's tiles weigh less than its weights, but two images' more
    c = oc = 128
    th = tw = 8
    assert th * tw * _tile_bytes(c, oc, 4) <= 16 * c * oc * 4 < 2 * th * tw * _tile_bytes(c, oc, 4)
    assert chunk_default(1, c, oc, th, tw, 4) == 0 and chunk_default(2, c, oc, th, tw, 4) > 0


def test_a_prime_row_gets_a_tile_of_several_columns() -> None:
    """The blocked conv's default on a 17-column row: a tile of several columns (the `owt`
    decision), the row's last tile being the partitioned remainder."""
    w = _conv_workload(_conv_model(16, 32, 3, hw=17), {"conv_algorithm"})
    dec = _Record()
    choose_rule(w, dec)
    assert 1 < dec.asked["owt"] < 17 and 17 % dec.asked["owt"]


def test_depthwise_runs_cover_prime_rows_with_several_columns() -> None:
    """A depthwise conv keeps several channel vectors in flight on any row: 17 or 19 columns run as
    wide runs and a remainder, a row with a good divisor keeps it."""
    assert depthwise_tile(17, 1) > 4 and depthwise_tile(19, 1) > 4
    assert depthwise_tile(56, 1) == 8 and depthwise_tile(14, 1) == 7
    assert all(1 <= depthwise_tile(ow, vecs) <= ow for ow in range(1, 70) for vecs in (1, 2, 4))
    w = _conv_workload(_conv_model(16, 16, 3, groups=16, hw=19, pointwise=True), {"conv_algorithm"})
    dec = _Record()
    choose_rule(w, dec)
    assert dec.asked["owt"] > 4


@pytest.mark.parametrize(
    ("conv", "order"),
    [
        # a large input and small weights: its rows once each, the weights per row from L2
        (dict(c=256, oc=128, k=1, hw=56), "oh_oc_ow"),
        (dict(c=256, oc=512, k=1, stride=2, hw=56), "oh_oc_ow"),
        # weights larger than L2: a sweep of the input per group of output channels instead
        (dict(c=1024, oc=512, k=1, hw=14), "oc_oh_ow"),
        (dict(c=512, oc=512, k=3, hw=28), "oc_oh_ow"),
        # a 1x1 stride-2 conv reads every other row of its input (AVX2's 8-lane pixels share lines,
        # so all lines of those rows): that share, within Haswell's L2, is what a sweep costs, not
        # the whole input, which is not
        (dict(c=512, oc=2048, k=1, stride=2, hw=14), "oc_oh_ow"),
        # one group of output channels: nothing to save, the channel-group order stays
        (dict(c=64, oc=8, k=3, hw=56), "oc_oh_ow"),
    ],
)
def test_blocked_conv_tiles_go_in_the_order_that_moves_fewer_bytes(conv: dict[str, int], order: str) -> None:
    # the rule for planes of several rows: pointwise_conv_rows would make the 14x14 plane one row;
    # the order of row tiles (the 7x7 output would take tiles over its plane)
    w = _conv_workload(_conv_model(**conv), {"conv_algorithm", "pointwise_conv_rows"})
    dec = _Record({"plane_tile": False})
    choose_rule(w, dec)
    assert dec.asked["tile_order"] == order, dec.asked


def test_the_tile_order_counts_the_targets_own_l2() -> None:
    """ResNet-50's strided 3x3 conv of layer2 (128 channels, 56x56 in): its weights, re-read per row
    of output, fit an Intel server core's 2 MiB L2 beside its input, so its rows go once each; on a
    Zen 3's 512 KiB the weights do not fit, and the input is swept once per group of channels."""
    for cpu, order in (("sapphirerapids", "oh_oc_ow"), ("znver3", "oc_oh_ow")):
        target = parse_target(cpu)
        blk = _blocked_conv_block(cpu, 128, 128, 3, 56, stride=2)
        groups = 128 // target.lanes() // 4
        assert tile_order(target, blk, groups, 2) == order, cpu


def test_avx512_convs_take_one_block_by_a_run_of_columns() -> None:
    """On AVX-512 cores starting one 512-bit FMA per cycle (embedded broadcasts) a dense blocked
    conv's tile is one channel block by a run of up to eight columns that leaves no latency-bound
    last run; AVX2 keeps register_tile's tile, and so do AVX-512 cores starting two FMAs a cycle."""
    avx512, avx2 = parse_target("znver4"), parse_target("haswell")
    assert avx512.fma_per_cycle == 1 and avx2.fma_per_cycle == 2
    assert one_block_run(56) == 8 and one_block_run(28) == 7 and one_block_run(7) == 7
    assert one_block_run(17) == 6 and one_block_run(147) == 7  # 6 + 6 + 5; 21 runs of 7

    def cycles(ow: int, run: int) -> int:  # a step of c columns: max(c, the FMA latency of 4)
        return (ow // run) * max(run, 4) + (max(ow % run, 4) if ow % run else 0)

    for ow in range(1, 120):
        run = one_block_run(ow)
        assert 1 <= run <= min(ow, 8), (ow, run)
        assert cycles(ow, run) == min(cycles(ow, r) for r in range(1, min(ow, 8) + 1)), (ow, run)
        assert block_register_tile(avx512, 8, 16, ow) == (1, run)
        assert block_register_tile(avx2, 8, 8, ow) == register_tile(avx2, 8, 8, ow)
    for two_pipes in ("znver5", "sapphirerapids", "skylake-avx512"):
        target = parse_target(two_pipes)
        assert target.vector_bits == 512 and target.fma_per_cycle == 2
        for ow in (7, 14, 17, 28, 56, 112):
            nb, owt = block_register_tile(target, 8, 16, ow)
            assert (nb, owt) == register_tile(target, 8, 16, ow, whole_rows=True), (two_pipes, ow)
            assert nb > 1, (two_pipes, ow, nb, owt)
    assert block_register_tile(parse_target("znver5"), 32, 16, 7) == (2, 7)  # not 4 x 5 and a run of 2


def test_whole_rows_tiles_leave_no_tail_when_one_is_as_fast() -> None:
    """whole_rows only reorders ties on cycles: a tile without a tail that the bytes-first order
    picked stays, and a tail remains only where the bytes-first order kept one as well."""
    target = parse_target("znver5")
    changed = 0
    for blocks in (1, 2, 4, 8, 32):
        for ow in range(1, 120):
            whole = register_tile(target, blocks, 16, ow, whole_rows=True)
            plain = register_tile(target, blocks, 16, ow)
            if ow % plain[1] == 0:
                assert whole == plain, (blocks, ow, whole, plain)
            if ow % whole[1]:
                assert ow % plain[1], (blocks, ow, whole, plain)
            changed += whole != plain
    assert changed  # the rows where a tail-free tile ties on cycles


@pytest.mark.parametrize(("k", "stride", "unrolled"), [(1, 1, True), (3, 2, True), (2, 2, False)])
def test_avx512_one_block_tiles_unroll_the_input_lanes_unless_the_window_is_two_wide(
    k: int, stride: int, unrolled: bool
) -> None:
    model = _conv_model(64, 64, k, stride=stride, hw=28)
    options = CompileOptions(target="znver4", disabled_passes=frozenset({"conv_algorithm"}))
    kernels = frontier_for(model, options, None).kernels
    (w,) = [g.workload for g in kernels if g.workload.anchor_op == "conv2d_nchwc"]
    dec = _Record()
    choose_rule(w, dec)
    assert dec.asked["nb"] == 1 and dec.asked["unroll_ci"] is unrolled, dec.asked


def test_two_fma_avx512_cores_share_each_broadcast_between_blocks() -> None:
    """Zen 5's default tile spans several channel blocks and leaves the input lanes rolled."""
    model = _conv_model(64, 64, 1, hw=28)
    options = CompileOptions(target="znver5", disabled_passes=frozenset({"conv_algorithm"}))
    kernels = frontier_for(model, options, None).kernels
    (w,) = [g.workload for g in kernels if g.workload.anchor_op == "conv2d_nchwc"]
    dec = _Record()
    choose_rule(w, dec)
    assert dec.asked["nb"] > 1 and dec.asked["unroll_ci"] is False, dec.asked


@pytest.mark.parametrize(("k", "stride", "share"), [(1, 2, 4), (1, 1, 1), (3, 1, 1)])
def test_input_footprint_counts_the_lines_a_strided_window_reads(k: int, stride: int, share: int) -> None:
    """With 16-lane pixels (a cache line each), a 1x1 stride-2 conv reads every other row and every
    other line of its input: a quarter; stride 1 reads it all (a padded 3x3 window, the padded copy)."""
    from compiler.ops.conv2d_blocked import input_footprint
    from compiler.tir.rules import block_of
    from compiler.tir.trace import Schedule

    model = _conv_model(64, 64, k, stride=stride, hw=28)
    options = CompileOptions(target="znver5", disabled_passes=frozenset({"conv_algorithm"}))
    kernels = frontier_for(model, options, None).kernels
    (w,) = [g.workload for g in kernels if g.workload.anchor_op == "conv2d_nchwc"]
    assert w.info.anchor_block is not None
    blk = block_of(Schedule(w.func, w.const_params), w.info.anchor_block)
    side = 28 + 2 * (k // 2)  # the padded input the window reads
    assert input_footprint(blk) == 64 * side * side * 4 // share


def _blocked_conv_block(target: str, c: int, oc: int, k: int, hw: int, groups: int = 1, stride: int = 1):  # type: ignore[no-untyped-def]
    """The conv block of a blocked conv lowered for `target`."""
    from compiler.tir.rules import block_of
    from compiler.tir.trace import Schedule

    options = CompileOptions(target=target, disabled_passes=frozenset({"conv_algorithm"}))
    fr = frontier_for(_conv_model(c, oc, k, groups=groups, hw=hw, stride=stride), options, None)
    (w,) = [g.workload for g in fr.kernels if g.workload.anchor_op == "conv2d_nchwc"]
    return block_of(Schedule(w.func), w.info.anchor_block)


def test_long_reductions_on_wide_planes_run_in_chunks_of_input_channels() -> None:
    """On a core starting two 512-bit FMAs per cycle, a group's weights over a long reduction stream
    from L2 for every register tile: FCN-ResNet50's 2048 -> 512 pointwise conv on 28x28 and
    ResNet-50's 1024 -> 256 on 14x14 run in chunks small enough for L1, also with a tile of 4
    blocks whose partial sums outgrow L1 (the weights are several times the sums). Not: weights that
    fit L1 (128 input channels), partial sums beyond L1 while the weights fit L2 and are not several
    times the sums (512 -> 128 and 512 -> 256 on 28x28, 256 -> 1024 on 14x14), a 7x7 plane (too few
    tiles to reuse a chunk), sums beyond L1 when one input block's weights outgrow the chunk budget
    (a 3x3 conv of 192 channels on 17x17), grouped convs, one-FMA or 256-bit cores."""
    from compiler.ops.conv2d_blocked import CHUNK_WEIGHT_BYTES

    server = "sapphirerapids"
    for c, oc, hw, nb, owt in ((2048, 512, 28, 4, 4), (1024, 256, 14, 2, 7), (1024, 256, 14, 4, 4)):
        blk = _blocked_conv_block(server, c, oc, 1, hw)
        chunk = ic_chunk(parse_target(server), blk, nb, owt)
        icb = c // 16
        assert 0 < chunk < icb and icb % chunk == 0, (c, chunk)
        assert chunk * nb * 16 * 16 * 4 <= CHUNK_WEIGHT_BYTES
        for other in ("znver4", "haswell"):  # one 512-bit FMA per cycle; 256-bit vectors
            assert ic_chunk(parse_target(other), _blocked_conv_block(other, c, oc, 1, hw), nb, owt) == 0
    refused = ((128, 512, 28, 4, 4), (512, 128, 28, 4, 4), (512, 256, 28, 4, 4), (256, 1024, 14, 4, 4),
               (2048, 512, 7, 2, 7))  # fmt: skip
    for c, oc, hw, nb, owt in refused:
        assert ic_chunk(parse_target(server), _blocked_conv_block(server, c, oc, 1, hw), nb, owt) == 0
    assert ic_chunk(parse_target(server), _blocked_conv_block(server, 192, 192, 3, 17), 4, 6) == 0
    grouped = _blocked_conv_block(server, 1024, 1024, 3, 28, groups=8)
    assert ic_chunk(parse_target(server), grouped, 4, 4) == 0


@pytest.mark.parametrize(
    ("channels", "hw", "tile"),
    [
        (512, 7, (2, 5)),  # a 7-wide row ends in a 3-column tile: 49 columns in tiles of 5, one of 4
        (96, 7, (2, 5)),
        (256, 14, None),  # 14 = 5 + 5 + 4: every tile keeps enough FMAs in flight
        (64, 56, None),  # the plane's partial sums would outgrow L1
        (112, 7, None),  # 7 groups on 2 threads: the rows balance better
    ],
)
def test_small_planes_whose_rows_end_in_narrow_tiles_run_tiles_over_the_plane(
    channels: int, hw: int, tile: tuple[int, int] | None
) -> None:
    target = parse_target("znver3")
    blocks = channels // 8
    row_tile = block_register_tile(target, blocks, 8, hw)
    assert plane_tile(target, blocks, 8, hw, hw, row_tile, 2) == tile
    w = _conv_workload(_conv_model(c=channels, oc=channels, k=3, hw=hw), {"conv_algorithm"})
    dec = _Record()
    choose_rule(w, dec)
    assert dec.asked["plane_tile"] is (tile is not None)
    if tile is not None:
        assert (dec.asked["nb"], dec.asked["owt"]) == tile
        assert "tile_order" not in dec.asked  # the parallel loop runs over channel groups only


def test_plane_tiles_whose_group_outgrows_l2_run_the_reduction_in_chunks() -> None:
    """Every plane tile re-reads its group's weights: where those and the input outgrow the core's
    L2 (ResNet-50's strided layer4 3x3 conv on a Zen 3's 512 KiB: 288 KiB of weights per group
    beside a 512 KiB padded input), the reduction runs in chunks whose weights fit the L1 budget.
    Its stride-1 twin (a 162 KiB input) fits there and keeps one pass, as does the strided one on
    a Zen 4's 1 MiB (a group of one 16-lane block), and convs of fewer channels; a 256 KiB L2
    (Haswell) chunks both."""
    from compiler.ops.conv2d_blocked import CHUNK_WEIGHT_BYTES

    zen3, zen4 = parse_target("znver3"), parse_target("znver4")
    assert (zen3.l2_bytes, zen4.l2_bytes, parse_target("haswell").l2_bytes) == (512 << 10, 1 << 20, 256 << 10)
    strided = _blocked_conv_block("znver3", 512, 512, 3, 14, stride=2)
    chunk = plane_chunk(zen3, strided, 2)
    assert 0 < chunk < 64 and 64 % chunk == 0
    assert chunk * 2 * 8 * 8 * 9 * 4 <= CHUNK_WEIGHT_BYTES
    assert plane_chunk(zen3, _blocked_conv_block("znver3", 512, 512, 3, 7), 2) == 0
    assert plane_chunk(zen4, _blocked_conv_block("znver4", 512, 512, 3, 14, stride=2), 1) == 0  # 16 lanes
    assert plane_chunk(zen3, _blocked_conv_block("znver3", 96, 96, 3, 7), 2) == 0
    w = _conv_workload(_conv_model(c=512, oc=512, k=3, hw=7), {"conv_algorithm"})  # haswell
    dec = _Record()
    choose_rule(w, dec)
    assert dec.asked["plane_tile"] and dec.asked["ic_chunk"] > 0


def test_one_block_avx512_tiles_keep_their_rows() -> None:
    target = parse_target("znver4")
    row_tile = block_register_tile(target, 32, 16, 7)
    assert plane_tile(target, 32, 16, 7, 7, row_tile, 2) is None


@pytest.mark.parametrize(
    ("target", "oc"), [("znver5", 80), ("znver5", 112), ("haswell", 40), ("haswell", 1000)]
)
def test_block_counts_no_tile_divides_take_tiles_over_padded_blocks(target: str, oc: int) -> None:
    """5, 7 or 125 channel blocks: none of 2-4 divides them, and the default tile still spans several
    blocks (the last group padded) where register_tile alone would give one-block tiles."""
    model = _conv_model(64, oc, 1, hw=14)
    options = CompileOptions(target=target, disabled_passes=frozenset({"conv_algorithm"}))
    kernels = frontier_for(model, options, None).kernels
    (w,) = [g.workload for g in kernels if g.workload.anchor_op == "conv2d_nchwc"]
    dec = _Record()
    choose_rule(w, dec)
    blocks = -(-oc // parse_target(target).lanes())
    assert dec.asked["nb"] > 1 and blocks % dec.asked["nb"], dec.asked


def test_padded_tiles_only_where_no_tile_divides_and_not_on_one_block_cores() -> None:
    """Counts that 2-4 divide keep register_tile's tiles; Zen 4 keeps its one-block tiles."""
    for target, blocks in [("znver5", 6), ("znver5", 8), ("haswell", 9), ("znver4", 5), ("haswell", 1)]:
        t = parse_target(target)
        assert padded_tile(t, blocks, t.lanes(), 1, 196, 2) is None, (target, blocks)
    t = parse_target("znver5")
    nb, owt = padded_tile(t, 7, 16, 1, 196, 2) or (0, 0)
    assert nb in (2, 4) and owt > 1  # an even number of groups for the two threads


def test_grouped_convs_keep_tiles_that_divide_their_blocks() -> None:
    """A grouped conv's tile over a padded group would read input channels past its input: five
    groups of one 16-lane block keep tiles of one block."""
    model = _conv_model(80, 80, 3, groups=5, hw=14)
    options = CompileOptions(target="znver5", disabled_passes=frozenset({"conv_algorithm"}))
    kernels = frontier_for(model, options, None).kernels
    (w,) = [g.workload for g in kernels if g.workload.anchor_op == "conv2d_nchwc"]
    dec = _Record()
    choose_rule(w, dec)
    assert dec.asked["nb"] == 1, dec.asked
