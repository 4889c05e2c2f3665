"""Compilation targets: the exact CPU (LLVM name + features) code is generated for."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from compiler.errors import CompilerError

# LLVM CPU names we accept by name, with their widest float vector (bits).
_AVX512 = {
    "skylake-avx512",
    "cascadelake",
    "cooperlake",
    "cannonlake",
    "icelake-client",
    "icelake-server",
    "tigerlake",
    "rocketlake",
    "sapphirerapids",
    "emeraldrapids",
    "graniterapids",
    "znver4",
    "znver5",
    "x86-64-v4",
}
_AVX2 = {
    "haswell",
    "broadwell",
    "skylake",
    "alderlake",
    "raptorlake",
    "meteorlake",
    "arrowlake",
    "znver1",
    "znver2",
    "znver3",
    "x86-64-v3",
    "bdver4",
}
_SSE = {"x86-64", "x86-64-v2", "nehalem", "westmere", "sandybridge", "ivybridge", "core2"}
KNOWN_CPUS = sorted(_AVX512 | _AVX2 | _SSE)


@dataclass(frozen=True, slots=True)
class Target:
    triple: str
    cpu: str
    features: str  # LLVM feature string ("+avx2,+fma,..."); empty means the CPU's defaults
    vector_bits: int
    cores: int

    @property
    def key(self) -> str:
        """Stable identity for tuning records: CPU name + a hash of the feature set."""
        digest = hashlib.sha256(self.features.encode()).hexdigest()[:12]
        return f"{self.cpu}-{digest}"

    def lanes(self, dtype: str = "float32") -> int:
        width = {"float32": 32, "int32": 32, "float64": 64, "int64": 64}.get(dtype, 32)
        return max(1, self.vector_bits // width)

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers a register tile may use (AVX-512 doubles them)."""
        return 32 if self.vector_bits >= 512 else 16

    def to_json(self) -> dict[str, object]:
        return {
            "triple": self.triple,
            "cpu": self.cpu,
            "features": self.features,
            "vector_width": self.vector_bits,
            "cores": self.cores,
            "key": self.key,
        }


def init_llvm() -> None:
    """Register LLVM's native target and printer (idempotent)."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


def host_target() -> Target:
    import llvmlite.binding as llvm

    init_llvm()
    cpu = llvm.get_host_cpu_name()
    feats = llvm.get_host_cpu_features()
    enabled = sorted(k for k, v in feats.items() if v)
    features = ",".join(f"+{k}" for k in enabled)
    bits = 512 if "avx512f" in enabled else 256 if "avx2" in enabled or "avx" in enabled else 128
    return Target(llvm.get_process_triple(), cpu, features, bits, os.cpu_count() or 1)


def parse_target(name: str | None) -> Target:
    """`host` (default) or an LLVM CPU name such as `znver4` or `skylake-avx512`."""
    if name in (None, "", "host", "native"):
        return host_target()
    import llvmlite.binding as llvm

    cpu = name.strip()
    if cpu not in KNOWN_CPUS:
        raise CompilerError(f"unknown target {name!r}; use 'host' or one of: {', '.join(KNOWN_CPUS)}")
    init_llvm()
    bits = 512 if cpu in _AVX512 else 256 if cpu in _AVX2 else 128
    return Target(llvm.get_process_triple(), cpu, "", bits, os.cpu_count() or 1)
