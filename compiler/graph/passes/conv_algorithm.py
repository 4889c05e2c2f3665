"""Convolution algorithm selection: direct blocked convolution or Winograd F(m x m, 3 x 3), m = 2, 3, 4.

Runs after alter_layout, on its conv2d_nchwc calls. A 3x3 stride-1 dense conv (dilated or not: a conv
dilated by d is d x d undilated convs over the phases of its plane, sharing one transformed weight)
with enough channels on each side spends most of its time in multiply-adds that Winograd's minimal
filtering saves: F(4x4) does 36 multiplications per channel pair and 4x4 output tile where the direct
conv does 144, at the price of transforming every input and output tile (work per channel, not per
channel pair) and of a round trip of the transformed tiles through memory. So the rule wants many
channel pairs per tile transform and enough tiles to amortize that round trip; below that the direct
conv stays.

Every rule states its reason (`why_direct`), recorded in the manifest's `conv_algorithms` entry.
The rule is a default, and measurements overrule it both ways (compiler/pipeline.py,
`measured_algorithms`): when tuning has measured both kernels of a conv, the compiler keeps the
faster. A Winograd conv can go back to direct; a conv the cost rule alone keeps direct (its
`winograd_candidates`: too few FLOPs saved per weight byte, a balance that differs from one CPU to
the next) can go to Winograd. Convs the structural rules keep direct have no Winograd kernel to
measure.
"""

from __future__ import annotations

from compiler.graph.ir import Call, Const, Expr, Graph, attrs_of
from compiler.ops.conv2d_winograd import KERNEL, axis_tiles, transform_weight
from compiler.target import Target

# graph op -> the op this pass may turn it into (`temper explain` lists the implementations)
REWRITES = {"conv2d_nchwc": "conv2d_winograd_nchwc"}
# channels on each side below which the tile transforms cost more than the multiplications saved
MIN_CHANNELS = 32
# output tiles of 4x4 need this many input channels: F(4x4) rounds several times worse than a direct
# sum (F(2x2) about as well), which deep networks compound; it is kept to the convs where its savings
# over F(2x2) are largest, those with long sums over channels. F(3x3) rounds between the two and needs
# half as many. The plane does not rule a tile out: tile_cost weighs the padding of a small plane (and
# of a dilated conv's phases, which share one transformed weight) against the products saved.
MIN_CHANNELS_TILE4 = 128
MIN_CHANNELS_TILE3 = 64
# FLOPs one byte of transformed weights counts for when the tile is chosen (`tile_cost`): a larger
# tile does fewer multiplications per output but its weights grow as (m+2)^2, and they stream from
# L3 or DRAM once per conv, mostly overlapped with the products (so below the bar's full DRAM price)
TILE_WEIGHT_BYTE_FLOPS = 4
MIN_OUTPUT = 4
# multiply-adds (as FLOPs) Winograd must save per byte its transformed weights add: the weights of
# F(m x m) are (m+2)^2 / 9 times the direct conv's, read once per run of the model, mostly from DRAM
# in a deep network. A conv with few output tiles (a small plane) saves little per weight byte, and
# the bytes cost more than the arithmetic saved. The bar sits at about the FLOPs a 2-core x86 machine
# with two 512-bit FMAs per core does in the time it streams one byte from DRAM, with some margin; a
# core doing fewer FLOPs per cycle has its bar scaled down in proportion (`flops_bar`).
MIN_FLOPS_SAVED_PER_BYTE = 16
# the FLOPs per cycle per core the bar above is set for: two 512-bit FMAs (2 x 16 lanes x 2 FLOPs)
BAR_FLOPS_PER_CYCLE = 64
MEASURED_FASTER = "tuning measured its direct kernel faster than its Winograd kernel"
MEASURED_WINOGRAD = "tuning measured it faster than its direct kernel"


def flops_bar(target: Target) -> float:
    """The FLOPs Winograd must save per weight byte it adds, on `target`: MIN_FLOPS_SAVED_PER_BYTE
    scaled by the FLOPs its cores start per cycle (vector lanes x FMAs per cycle) against the bar's
    BAR_FLOPS_PER_CYCLE. DRAM streams about as many bytes per cycle to a 256-bit core as to a 512-bit
    one, while the narrower core does half the arithmetic in that time: the products a transformed
    weight byte saves are worth twice as much there."""
    per_cycle = 2 * target.lanes("float32") * target.fma_per_cycle
    return MIN_FLOPS_SAVED_PER_BYTE * min(1.0, per_cycle / BAR_FLOPS_PER_CYCLE)


def why_direct(
    call: Call,
    keep_direct: frozenset[str] = frozenset(),
    winograd: frozenset[str] = frozenset(),
    bar: float = MIN_FLOPS_SAVED_PER_BYTE,
) -> str | None:
    """None when this conv2d_nchwc can run as Winograd, else why it stays direct (`keep_direct`:
    the convs that tuning measured faster direct; `winograd`: those it measured faster as Winograd,
    which the cost rule no longer keeps direct; `bar`: the target's FLOPs per weight byte, flops_bar)."""
    reason = _structural_reason(call)
    if reason is not None:
        return reason
    if call.name in keep_direct:
        return MEASURED_FASTER
    if call.name in winograd:
        return None
    return _cost_reason(call, bar)


def _structural_reason(call: Call) -> str | None:
    """Why this call cannot run as Winograd here at all (None: it can)."""
    if call.op != "conv2d_nchwc":
        return "not a blocked conv2d"
    w = call.args[1]
    if not isinstance(w, Const):
        return "its weight is not a constant (it cannot be transformed at compile time)"
    ocb, icb, kh, kw, ib, ob = w.type.shape
    if (kh, kw) != (KERNEL, KERNEL):
        return f"its kernel is {kh}x{kw}, Winograd here is for 3x3"
    if tuple(call.attr("strides")) != (1, 1):
        return "strided"
    if call.attr("groups", 1) != 1:
        return "grouped (the products over channels are too short)"
    if ib != ob:
        return f"its input is blocked by {ib}, not by {ob} (a network's first conv)"
    if icb * ib < MIN_CHANNELS or ocb * ob < MIN_CHANNELS:
        return f"fewer than {MIN_CHANNELS} input or output channels (the tile transforms would dominate)"
    oh, ow = call.type.shape[2], call.type.shape[3]
    if min(oh, ow) < MIN_OUTPUT:
        return f"its output ({oh}x{ow}) is smaller than {MIN_OUTPUT}x{MIN_OUTPUT}"
    d = _dilations(call)
    phase = (-(-oh // d[0]), -(-ow // d[1]))
    if min(phase) < MIN_OUTPUT:
        return (
            f"dilated by {d[0]}x{d[1]}, its {oh}x{ow} output is {d[0] * d[1]} phases of "
            f"{phase[0]}x{phase[1]}, smaller than {MIN_OUTPUT}x{MIN_OUTPUT}"
        )
    return None


def _cost_reason(call: Call, bar: float) -> str | None:
    """Why the cost rule keeps a conv that could run as Winograd direct (None: it does not)."""
    ocb, icb, _, _, ib, ob = call.args[1].type.shape
    oh, ow = call.type.shape[2], call.type.shape[3]
    d = _dilations(call)
    m = tile_for(call)
    saved = flops_saved_per_byte(icb * ib, ocb * ob, oh, ow, m, d)
    if saved < bar:
        dilated = f" dilated by {d[0]}x{d[1]}" if d != (1, 1) else ""
        return (
            f"F({m}x{m}) would save {saved:.1f} FLOPs per byte its transformed weights add, under "
            f"{bar:g} (a {oh}x{ow} output{dilated} has too few tiles to pay for reading them)"
        )
    return None


def winograd_candidates(graph: Graph, bar: float = MIN_FLOPS_SAVED_PER_BYTE) -> frozenset[str]:
    """The blocked convs of `graph` that only the cost rule (at `bar`) keeps direct: Winograd kernels
    tuning may measure against them (whether the FLOPs saved pay for the weight bytes added depends
    on the CPU's arithmetic against its memory)."""
    return frozenset(
        c.name
        for c in graph.calls()
        if c.op == "conv2d_nchwc" and _structural_reason(c) is None and _cost_reason(c, bar) is not None
    )


def _dilations(call: Call) -> tuple[int, int]:
    dh, dw = call.attr("dilations")
    return int(dh), int(dw)


def flops_saved_per_byte(
    c: int, oc: int, oh: int, ow: int, m: int, dilations: tuple[int, int] = (1, 1)
) -> float:
    """FLOPs F(m x m, 3 x 3) saves over the direct conv, per byte of float32 weights it adds (a
    dilated conv's tiles are counted per phase, each padded to whole tiles)."""
    tiles = axis_tiles(oh, m, dilations[0]) * axis_tiles(ow, m, dilations[1])
    direct = 2 * oc * c * KERNEL * KERNEL * oh * ow
    products = 2 * oc * c * (m + 2) ** 2 * tiles
    extra = 4 * oc * c * ((m + 2) ** 2 - KERNEL * KERNEL)
    return (direct - products) / extra


def tile_for(call: Call) -> int:
    """The output tile m of F(m x m, 3 x 3) for a conv the rule admits: of the tiles its channels
    allow, the one of least `tile_cost` over its plane (a dilated conv's phases counted apart)."""
    oh, ow = call.type.shape[2], call.type.shape[3]
    _, icb, _, _, ib, _ = call.args[1].type.shape
    d = _dilations(call)
    return min(allowed_tiles(icb * ib), key=lambda m: (tile_cost(oh, ow, m, d), m))


def allowed_tiles(c: int) -> list[int]:
    """The tiles whose rounding a conv of `c` input channels may take (F(2x2) always)."""
    tiles = [2]
    if c >= MIN_CHANNELS_TILE3:
        tiles.append(3)
    if c >= MIN_CHANNELS_TILE4:
        tiles.append(4)
    return tiles


def tile_cost(oh: int, ow: int, m: int, dilations: tuple[int, int] = (1, 1)) -> int:
    """Per channel pair, the products' FLOPs of F(m x m, 3 x 3) over the plane (padded to whole
    tiles) plus its transformed weights' bytes at TILE_WEIGHT_BYTE_FLOPS each: on a large plane the
    largest tile wins (fewest multiplications), on a small one a smaller tile (less padding, fewer
    weight bytes)."""
    tiles = axis_tiles(oh, m, dilations[0]) * axis_tiles(ow, m, dilations[1])
    return (m + 2) ** 2 * (2 * tiles + 4 * TILE_WEIGHT_BYTE_FLOPS)


def choose_conv_algorithm(
    graph: Graph,
    keep_direct: frozenset[str] = frozenset(),
    winograd: frozenset[str] = frozenset(),
    bar: float = MIN_FLOPS_SAVED_PER_BYTE,
) -> Graph:
    """Rewrite every conv2d_nchwc the rule (at `bar`, flops_bar) admits into conv2d_winograd_nchwc
    (weights transformed), but those named in `keep_direct`; those named in `winograd` need only the
    structural rules."""
    if not any(why_direct(c, keep_direct, winograd, bar) is None for c in graph.calls()):
        return graph
    made: dict[int, Expr] = {}

    def rebuilt(node: Expr) -> Expr:
        return made.get(id(node), node)

    for node in graph.nodes():
        if not isinstance(node, Call):
            continue
        args = tuple(rebuilt(a) for a in node.args)
        if why_direct(node, keep_direct, winograd, bar) is None:
            w = node.args[1]
            assert isinstance(w, Const)
            m = tile_for(node)
            u = Const(f"{w.name}.winograd{m}", transform_weight(w.data, m))
            dilated = {"dilations": _dilations(node)} if _dilations(node) != (1, 1) else {}
            attrs = attrs_of({"pads": tuple(node.attr("pads")), "tile": m, **dilated})
            made[id(node)] = Call("conv2d_winograd_nchwc", (args[0], u), attrs, node.type, node.name)
        elif any(a is not b for a, b in zip(args, node.args, strict=True)):
            made[id(node)] = Call(node.op, args, node.attrs, node.type, node.name)
    return graph.with_outputs(tuple(rebuilt(o) for o in graph.outputs))


def algorithm_report(
    optimized: Graph,
    ran: bool,
    keep_direct: frozenset[str] = frozenset(),
    winograd: frozenset[str] = frozenset(),
    bar: float = MIN_FLOPS_SAVED_PER_BYTE,
) -> dict[str, dict[str, str]]:
    """For the manifest: which blocked convs run as Winograd (with their tile, and the measurement
    when one made them so) and why the others stay direct."""
    winograd_tiles = {}
    for c in optimized.calls():
        if c.op == "conv2d_winograd_nchwc":
            tile = f"F({c.attr('tile')}x{c.attr('tile')}, 3x3)"
            winograd_tiles[c.name] = f"{tile}: {MEASURED_WINOGRAD}" if c.name in winograd else tile
    not_run = "the conv_algorithm pass did not run (opt level or disabled)"
    blocked = [c for c in optimized.calls() if c.op == "conv2d_nchwc"]
    direct = {
        c.name: (why_direct(c, keep_direct, winograd, bar) if ran else None) or not_run for c in blocked
    }
    return {"winograd": winograd_tiles, "direct": direct}
