"""Compilation targets: the exact CPU (LLVM name + features) code is generated for."""

from __future__ import annotations

import contextlib
import functools
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

# LLVM x86 features whose instructions a kernel may contain, as Linux's /proc/cpuinfo names them
# (the runtime checks these before loading: code for a missing one dies of SIGILL)
_CPUINFO_NAMES = {
    **{f: f for f in ("sse", "sse2", "ssse3", "avx", "avx2", "fma", "f16c", "bmi2", "popcnt", "movbe")},
    **{f: f for f in ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx512ifma")},
    **{f: f for f in ("avx512vbmi", "gfni", "vaes", "vpclmulqdq")},
    **{f: f"avx512_{f[6:]}" for f in ("avx512vbmi2", "avx512vnni", "avx512bitalg", "avx512vpopcntdq")},
    **{f: f"avx512_{f[6:]}" for f in ("avx512bf16", "avx512fp16")},
    "avxvnni": "avx_vnni",
    "sse3": "pni",
    "sse4.1": "sse4_1",
    "sse4.2": "sse4_2",
    "bmi": "bmi1",
    "lzcnt": "abm",
}
# what a CPU named by --target implies at least (the check for named targets; host targets list
# every feature of the compiling CPU)
_NAMED_FEATURES = {
    512: ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"),
    256: ("sse4_2", "avx", "avx2", "fma"),
    128: ("sse2",),
}


# AVX-512 CPUs whose cores start one 512-bit FMA per cycle: Zen 4 runs each as two 256-bit halves and
# Intel's client cores fuse their two 256-bit FMA ports into one; Zen 5 and Intel's server cores start two
_ONE_FMA_512 = frozenset({"znver4", "cannonlake", "icelake-client", "tigerlake", "rocketlake"})
# each core's private L2 by LLVM CPU name (Intel's hybrid parts: their performance cores); a CPU not
# listed is taken at DEFAULT_L2_BYTES, the smallest of the x86 server cores temper runs on
_L2_KIB = {
    **dict.fromkeys(("haswell", "broadwell", "skylake", "sandybridge", "ivybridge", "nehalem"), 256),
    **dict.fromkeys(
        ("znver1", "znver2", "znver3", "bdver4", "icelake-client", "cannonlake", "rocketlake"), 512
    ),
    **dict.fromkeys(("znver4", "znver5", "skylake-avx512", "cascadelake", "cooperlake"), 1024),
    **dict.fromkeys(("icelake-server", "tigerlake", "alderlake"), 1280),
    **dict.fromkeys(("sapphirerapids", "emeraldrapids", "graniterapids", "raptorlake", "meteorlake"), 2048),
    "arrowlake": 3072,
}
DEFAULT_L2_BYTES = 512 << 10
# the host's last-level cache where sysfs does not tell: the L3 of one core complex of a current x86 server
DEFAULT_LLC_BYTES = 32 << 20
# features only Intel's server cores have: a hypervisor may report such a core by a client model
# number (LLVM then names it, say, rocketlake), but its features still tell it is a server core
_SERVER_CORE_FEATURES = ("+amx-tile", "+avx512fp16")
# the private L2 of every Intel core with those features (Sapphire, Emerald and Granite Rapids)
_SERVER_L2_KIB = 2048

# cycles before an FMA's result can feed the next FMA into the same accumulator (current x86 cores)
FMA_LATENCY = 4


def tile_step_cycles(fmas: int, loads: int, fma_per_cycle: int) -> float:
    """Cycles of one reduction step of a register tile: its FMAs at `fma_per_cycle`, its loads (a
    vector or a broadcast each) at two per cycle, and at least the FMA latency, since each
    accumulator's FMA waits for its previous step's. The one cost model of the register tiles of
    every op family (matmul, blocked conv)."""
    return max(fmas / fma_per_cycle, loads / 2, FMA_LATENCY)


@dataclass(frozen=True, slots=True)
class Target:
    triple: str
    cpu: str
    # LLVM feature string: every feature the CPU reports, "+" where it has it and "-" where it does
    # not ("+avx2,-avx512f,..."); empty means the named CPU's defaults
    features: str
    vector_bits: int
    cores: int

    @property
    def enabled_features(self) -> list[str]:
        """The "+" entries of the feature string: what this CPU has."""
        return [f for f in self.features.split(",") if f.startswith("+")]

    @property
    def key(self) -> str:
        """Stable identity for tuning records: CPU name + a hash of the features the CPU has (the
        ones it lacks follow from those, so they do not enter the hash)."""
        digest = hashlib.sha256(",".join(self.enabled_features).encode()).hexdigest()[:12]
        return f"{self.cpu}-{digest}"

    def lanes(self, dtype: str = "float32") -> int:
        width = {"float32": 32, "int32": 32, "float64": 64, "int64": 64}.get(dtype, 32)
        return max(1, self.vector_bits // width)

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers a register tile may use (AVX-512 doubles them)."""
        return 32 if self.vector_bits >= 512 else 16

    @property
    def fma_per_cycle(self) -> int:
        """Full-width vector FMAs a core starts per cycle: how many a register tile keeps busy."""
        if self.vector_bits < 512 or self.cpu not in _ONE_FMA_512:
            return 2
        return 2 if self._server_core else 1

    @property
    def dot_instructions(self) -> dict[int, str]:
        """By int32 lane count (16: 512-bit, 8: 256-bit, 4: 128-bit), the instruction an 8-bit integer
        conv's step of four u8 x s8 products takes, each faster than float32's FMAs at that width:
        - vpdpbusd (VNNI): the four products summed into each lane, exact;
        - vpmaddubsw (AVX2, AVX-512 BW, SSSE3): pairs of products summed in int16 with saturation,
          exact only for weights whose pairs cannot saturate (DOT4_PAIRS_FIT; 7-bit weights always).
        Where a step is vpmaddubsw, weights whose pairs could saturate take vpmaddwd over values widened
        to int16 instead (DOT2): two exact products per lane and instruction, an FMA's one. A named CPU
        without a feature list counts with the features its name implies, so never VNNI (its code
        must run on any CPU of that name as LLVM defines it)."""
        if not self.triple.startswith(("x86_64", "i686", "i386")):
            return {}
        have = set(_NAMED_FEATURES[self.vector_bits])
        if self.features:
            have = {f[1:] for f in self.enabled_features}
        found: dict[int, str] = {}
        if "avx512vnni" in have:
            found[16] = "vpdpbusd"
            if "avx512vl" in have:
                found[8] = "vpdpbusd"
        if "avxvnni" in have:
            found[8] = "vpdpbusd"
        for lanes, feature in ((16, "avx512bw"), (8, "avx2"), (4, "ssse3")):
            if feature in have:
                found.setdefault(lanes, "vpmaddubsw")
        return found

    @property
    def _server_core(self) -> bool:
        """Whether the features tell an Intel server core, whatever model number the CPU reports."""
        return any(f in self.enabled_features for f in _SERVER_CORE_FEATURES)

    @property
    def l2_bytes(self) -> int:
        """One core's private L2, by CPU name: what a kernel can keep there between the register
        tiles that re-read it (a named CPU and the host alike, so that both build the same code; a
        server core that a hypervisor reports by a client's model number, by its features)."""
        kib = _L2_KIB.get(self.cpu)
        if kib is not None and kib < _SERVER_L2_KIB and self._server_core:
            kib = _SERVER_L2_KIB
        return kib << 10 if kib is not None else DEFAULT_L2_BYTES

    @property
    def required_features(self) -> list[str]:
        """CPU features (as /proc/cpuinfo names them) a machine needs to run code for this target."""
        if not self.triple.startswith(("x86_64", "i686", "i386")):
            return []
        if not self.features:  # a named CPU: its defaults
            return sorted(_NAMED_FEATURES[self.vector_bits])
        enabled = (f[1:] for f in self.enabled_features)
        return sorted({_CPUINFO_NAMES[f] for f in enabled if f in _CPUINFO_NAMES})

    def to_json(self) -> dict[str, object]:
        return {
            "triple": self.triple,
            "cpu": self.cpu,
            "features": self.features,
            "required_features": self.required_features,
            "vector_width": self.vector_bits,
            "cores": self.cores,
            "key": self.key,
        }


CPU0_CACHES = "/sys/devices/system/cpu/cpu0/cache"


def host_cache_bytes(level: int, root: str = CPU0_CACHES) -> int:
    """The size of the first core's cache of this level as sysfs lists it under `root` (its index*
    directories), 0 where it cannot be read."""
    size_bytes = 0
    with contextlib.suppress(OSError, ValueError):
        for index in sorted(os.listdir(root)):
            base = f"{root}/{index}"
            with open(f"{base}/level") as lvl, open(f"{base}/size") as size:
                if lvl.read().strip() == str(level):
                    text = size.read().strip().upper()
                    scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
                    size_bytes = int(text.rstrip("KM")) * scale
    return size_bytes


@functools.cache
def host_l2_bytes() -> int:
    """This machine's total L2 (per-core size x cores, from sysfs, read once), 2 MiB per core where
    it cannot be read."""
    per_core = host_cache_bytes(2)
    return (per_core if per_core > 0 else 2 << 20) * (os.cpu_count() or 1)


@functools.cache
def host_llc_bytes() -> int:
    """The last-level cache the first core shares with the others (its L3 from sysfs, read once; the
    L2s where there is no L3), DEFAULT_LLC_BYTES where neither can be read."""
    return host_cache_bytes(3) or host_cache_bytes(2) * (os.cpu_count() or 1) or DEFAULT_LLC_BYTES


# LLVM options temper's code generation sets for the whole process, where LLVM has them (x86 hosts).
# X86's machine combiner reassociates chains of integer vector adds to shorten their latency: in an
# integer dot kernel's unrolled step (a vpmaddwd, or vpmaddubsw and vpmaddwd, then a vpaddd into the
# accumulator) it adds pairs of products into temporaries first, and the register tile, sized for
# one temporary, spills to the stack every step. Float kernels ran no slower without it: their FMAs
# are never reassociated, and their sums are vectorized by the schedule already.
X86_LLVM_OPTIONS = ("-x86-machine-combiner=false",)


@functools.cache
def init_llvm() -> None:
    """Register LLVM's native target and printer, and set X86_LLVM_OPTIONS on an x86 host (once per
    process: a worker process runs it again for itself)."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    if llvm.get_process_triple().split("-", 1)[0] in ("x86_64", "i386", "i686"):
        # an option LLVM does not know ends the process, so only where the X86 backend is native
        for option in X86_LLVM_OPTIONS:
            llvm.set_option("temper", option)


def host_target() -> Target:
    """This machine: its CPU's name and the features it reports. The features LLVM's CPU name would
    imply but the CPU lacks are turned off explicitly: a hypervisor may hide a Zen 4's AVX-512, and
    code for the name alone would then die of SIGILL."""
    import llvmlite.binding as llvm

    init_llvm()
    cpu = llvm.get_host_cpu_name()
    reported = llvm.get_host_cpu_features()
    return host_target_of(llvm.get_process_triple(), cpu, dict(reported), os.cpu_count() or 1)


def host_target_of(triple: str, cpu: str, reported: dict[str, bool], cores: int) -> Target:
    """The target of a CPU reporting `reported` (feature name -> has it)."""
    features = ",".join(f"{'+' if has else '-'}{name}" for name, has in sorted(reported.items()))
    has = {name for name, on in reported.items() if on}
    bits = 512 if "avx512f" in has else 256 if "avx2" in has or "avx" in has else 128
    return Target(triple, cpu, features, bits, cores)


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
    host = host_target()
    if host.cpu == cpu and set(_NAMED_FEATURES[bits]) <= set(host.required_features):
        return host  # this very machine by name: the same code, the same records as 'host'
    return Target(llvm.get_process_triple(), cpu, "", bits, os.cpu_count() or 1)


_NAMED_DIGEST = hashlib.sha256(b"").hexdigest()[:12]


def target_key(name_or_key: str) -> str:
    """The records key of a target given by name ('host', an LLVM CPU name) or by key (CPU name,
    dash, features digest, as `Target.key` makes them); anything else is an unknown target error."""
    text = name_or_key.strip()
    if text in ("host", "native") or text in KNOWN_CPUS or "-" not in text:
        return parse_target(text).key
    return text


def describe_key(key: str) -> str:
    """A target key in words: its CPU and which feature set its digest stands for."""
    cpu, _, digest = key.rpartition("-")
    host = host_target()
    if key == host.key:
        return f"{cpu}: this machine's CPU and features ({', '.join(host.required_features)})"
    if digest == _NAMED_DIGEST and cpu in KNOWN_CPUS:
        bits = 512 if cpu in _AVX512 else 256 if cpu in _AVX2 else 128
        return f"{cpu}: the named CPU's default features (at least {', '.join(_NAMED_FEATURES[bits])})"
    return f"{cpu}: another machine's feature set (digest {digest})"
