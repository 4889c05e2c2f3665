"""Targets: names resolve to keys a person can read; the host's own CPU name is the host."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.errors import CompilerError
from compiler.target import (
    FMA_LATENCY,
    KNOWN_CPUS,
    Target,
    describe_key,
    host_cache_bytes,
    host_llc_bytes,
    host_target,
    host_target_of,
    parse_target,
    target_key,
    tile_step_cycles,
)


def test_the_hosts_cpu_by_name_is_the_host() -> None:
    """...unless the host lacks what the name implies (a Zen 4 with its AVX-512 hidden): then the
    name stands for the CPU as its maker built it, code the runtime will not load here."""
    host = host_target()
    if host.cpu not in KNOWN_CPUS:
        pytest.skip(f"this machine's CPU {host.cpu!r} is not one temper accepts by name")
    named = parse_target(host.cpu)
    if set(named.required_features) <= set(host.required_features):
        assert named == host
        assert target_key(host.cpu) == target_key("host") == host.key
    else:
        assert named.features == "" and named.key != host.key
        assert set(named.required_features) - set(host.required_features)


def test_other_named_cpus_have_their_default_features() -> None:
    host = host_target()
    other = next(c for c in ("haswell", "skylake-avx512") if c != host.cpu)
    named = parse_target(other)
    assert named.features == "" and named.key.startswith(f"{other}-") and named.key != host.key
    assert target_key(other) == named.key
    assert "the named CPU's default features" in describe_key(named.key)


def test_keys_are_described_and_unknown_names_refused() -> None:
    host = host_target()
    assert describe_key(host.key).startswith(f"{host.cpu}: this machine's CPU and features (")
    assert "another machine's feature set (digest 0123456789ab)" in describe_key("znver4-0123456789ab")
    assert target_key("znver4-0123456789ab") == "znver4-0123456789ab"  # a key is kept as it is
    for bad in ("pentium9", "host2", ""):
        with pytest.raises(CompilerError, match="unknown target"):
            target_key(bad) if bad else parse_target("  ")


def test_fma_pipes_follow_the_features_when_the_cpu_name_is_a_client_cores() -> None:
    """A hypervisor may give a server core a client model number (LLVM then names it rocketlake):
    its server-only features (AMX, AVX512-FP16) still give it two 512-bit FMA pipes; a client core
    with neither keeps one, and a named CPU its table entry."""

    def target(cpu: str, features: str) -> Target:
        return Target("x86_64-unknown-linux-gnu", cpu, features, 512, 2)

    client = "+avx2,+avx512f,+avx512bw,+avx512dq,+avx512vl,+fma"
    assert target("rocketlake", client).fma_per_cycle == 1
    assert target("rocketlake", client + ",+amx-tile,+amx-bf16").fma_per_cycle == 2
    assert target("tigerlake", client + ",+avx512fp16").fma_per_cycle == 2
    assert target("rocketlake", client + ",-amx-tile,-avx512fp16").fma_per_cycle == 1
    assert target("znver4", "").fma_per_cycle == 1 and target("znver5", "").fma_per_cycle == 2


def test_a_server_core_named_as_a_client_keeps_its_l2() -> None:
    """Every Intel core with AMX or AVX512-FP16 has a 2 MiB L2: a hypervisor's client model number
    (rocketlake) does not shrink it to the client's 512 KiB, which a real client core keeps; named
    CPUs keep their table entries."""
    client = "+avx2,+avx512f,+avx512bw,+avx512dq,+avx512vl,+fma"

    def l2(cpu: str, features: str) -> int:
        return Target("x86_64-unknown-linux-gnu", cpu, features, 512, 2).l2_bytes

    assert l2("rocketlake", client + ",+amx-tile,+avx512fp16") == 2 << 20
    assert l2("rocketlake", client) == l2("rocketlake", client + ",-amx-tile") == 512 << 10
    assert l2("emeraldrapids", "") == 2 << 20 and l2("znver4", "") == 1 << 20


def _zen4_reporting(avx512: bool) -> Target:
    """A Zen 4 as LLVM names it, with or without the AVX-512 a hypervisor may hide."""
    base = {f: True for f in ("sse4.2", "avx", "avx2", "fma", "f16c", "bmi2")}
    hidden = dict.fromkeys(("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512vnni"), avx512)
    return host_target_of("x86_64-unknown-linux-gnu", "znver4", {**base, **hidden}, 2)


def _vector_kernel_assembly(target: Target) -> str:
    """A 16-float multiply-add compiled for `target`."""
    from llvmlite import ir

    from compiler.codegen.library import _LLVM_LOCK, optimized_module, target_machine

    module = ir.Module(name="t")
    module.triple = target.triple
    vec = ir.VectorType(ir.FloatType(), 16)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [vec.as_pointer()] * 3), name="madd")
    b = ir.IRBuilder(fn.append_basic_block())
    lhs, rhs, out = b.load(fn.args[0]), b.load(fn.args[1]), fn.args[2]
    b.store(b.fadd(b.fmul(lhs, rhs), rhs), out)
    b.ret_void()
    with _LLVM_LOCK:
        return str(target_machine(target).emit_assembly(optimized_module([str(module)], target)))


def test_features_the_cpu_lacks_are_turned_off_though_its_name_implies_them() -> None:
    """LLVM names a Zen 4 `znver4` whether or not its AVX-512 is visible; code for the name alone
    would use zmm registers and die of SIGILL where the hypervisor hides them."""
    hidden, full = _zen4_reporting(avx512=False), _zen4_reporting(avx512=True)
    assert hidden.vector_bits == 256 and full.vector_bits == 512
    assert "-avx512f" in hidden.features.split(",") and "+avx512f" in full.features.split(",")
    assert "avx512f" not in hidden.required_features and "avx512f" in full.required_features
    assert "zmm" in _vector_kernel_assembly(full)
    code = _vector_kernel_assembly(hidden)
    assert "ymm" in code and "zmm" not in code and "{%k" not in code
    assert not any(f"%ymm{r}" in code for r in range(16, 32))  # EVEX-only registers


def test_the_key_hashes_only_the_features_the_cpu_has() -> None:
    """Keys of tuning records stay what they were when the feature string listed only "+" entries."""
    import hashlib

    full = _zen4_reporting(avx512=True)
    plus = ",".join(f for f in full.features.split(",") if f.startswith("+"))
    assert full.key == f"znver4-{hashlib.sha256(plus.encode()).hexdigest()[:12]}"
    assert _zen4_reporting(avx512=False).key != full.key


def test_the_host_needs_only_features_this_machine_reports() -> None:
    """The runtime refuses code needing a feature /proc/cpuinfo lacks: the host's own must pass."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags")).split(":", 1)[1].split()
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags line on this machine")
    assert set(host_target().required_features) <= set(flags)


def _sysfs_caches(root: Path, caches: dict[str, tuple[str, str]]) -> str:
    for index, (level, size) in caches.items():
        (root / index).mkdir(parents=True)
        (root / index / "level").write_text(level + "\n")
        (root / index / "size").write_text(size + "\n")
    return str(root)


def test_cache_sizes_are_read_from_sysfs_by_level(tmp_path: Path) -> None:
    root = _sysfs_caches(
        tmp_path / "cache",
        {"index0": ("1", "32K"), "index1": ("1", "32K"), "index2": ("2", "512K"), "index3": ("3", "32768K")},
    )
    assert host_cache_bytes(1, root) == 32 << 10
    assert host_cache_bytes(2, root) == 512 << 10
    assert host_cache_bytes(3, root) == 32 << 20
    assert host_cache_bytes(4, root) == 0  # no such level
    assert host_cache_bytes(3, str(tmp_path / "missing")) == 0  # nothing to read
    broken = _sysfs_caches(tmp_path / "broken", {"index0": ("3", "lots")})
    assert host_cache_bytes(3, broken) == 0


def test_the_hosts_last_level_cache_is_its_l3_where_sysfs_lists_one() -> None:
    l3 = host_cache_bytes(3)
    assert host_llc_bytes() == l3 if l3 else host_llc_bytes() > 0


def test_a_tile_step_takes_its_fmas_its_loads_or_the_fma_latency_whichever_is_longest() -> None:
    """The register tiles' one cost model: 6 x 4 accumulators are FMA bound (12 cycles at two a
    cycle, 24 at one), a one-row tile of 8 vectors is load bound (9 loads at two a cycle against
    4 FMA cycles), and a tile of 2 accumulators still waits for the FMA latency."""
    assert tile_step_cycles(24, 10, 2) == 12 and tile_step_cycles(24, 10, 1) == 24
    assert tile_step_cycles(8, 9, 2) == 4.5
    assert tile_step_cycles(2, 3, 2) == FMA_LATENCY
