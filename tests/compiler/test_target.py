"""Targets: names resolve to keys a person can read; the host's own CPU name is the host."""

from __future__ import annotations

import pytest

from compiler.errors import CompilerError
from compiler.target import KNOWN_CPUS, describe_key, host_target, parse_target, target_key


def test_the_hosts_cpu_by_name_is_the_host() -> None:
    host = host_target()
    if host.cpu not in KNOWN_CPUS:
        pytest.skip(f"this machine's CPU {host.cpu!r} is not one temper accepts by name")
    assert parse_target(host.cpu) == host
    assert target_key(host.cpu) == target_key("host") == host.key


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
    from compiler.target import Target

    def target(cpu: str, features: str) -> Target:
        return Target("x86_64-unknown-linux-gnu", cpu, features, 512, 2)

    client = "+avx2,+avx512f,+avx512bw,+avx512dq,+avx512vl,+fma"
    assert target("rocketlake", client).fma_per_cycle == 1
    assert target("rocketlake", client + ",+amx-tile,+amx-bf16").fma_per_cycle == 2
    assert target("tigerlake", client + ",+avx512fp16").fma_per_cycle == 2
    assert target("rocketlake", client + ",-amx-tile,-avx512fp16").fma_per_cycle == 1
    assert target("znver4", "").fma_per_cycle == 1 and target("znver5", "").fma_per_cycle == 2
