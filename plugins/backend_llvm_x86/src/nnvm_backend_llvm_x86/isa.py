"""What the x86 target knows of its ISA: vector width and extensions from a feature string or a CPU name.

llvmlite does not list the features of a CPU named by ``-mcpu`` alone, so the vector width (and the
extensions a schedule or a module's footer cares about) is inferred from known CPU names.
"""

from __future__ import annotations

from functools import lru_cache

from nnvm_backend_llvm import LLVMTarget, feature_switches, host_cpu, host_features

X86_ARCHS = ("x86_64", "i386", "i686")
# The x86 extensions LLVM may use in our kernels, as (LLVM feature name, Linux /proc/cpuinfo flag): what
# an export's footer records (``FEATURE_PROBES``), so a loader on a CPU without one refuses the module.
X86_FEATURES = (
    ("sse4.1", "sse4_1"), ("sse4.2", "sse4_2"), ("avx", "avx"), ("avx2", "avx2"), ("fma", "fma"),
    ("f16c", "f16c"), ("avx512f", "avx512f"), ("avx512cd", "avx512cd"), ("avx512bw", "avx512bw"),
    ("avx512dq", "avx512dq"), ("avx512vl", "avx512vl"), ("avx512vnni", "avx512_vnni"),
    ("avx512bf16", "avx512_bf16"), ("avx512fp16", "avx512_fp16"), ("avxvnni", "avx_vnni"),
    ("amx-tile", "amx_tile"),
)
FEATURE_PROBES = {name: f"cpuinfo:{flag}" for name, flag in X86_FEATURES}
_BASE_AVX2 = ("sse4.1", "sse4.2", "avx", "avx2", "fma", "f16c")
_BASE_AVX512 = (*_BASE_AVX2, "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl")

# x86 CPUs by LLVM name (prefixes), for ``-mcpu`` alone: llvmlite does not list a named CPU's features.
AVX512_CPUS = ("cascadelake", "cooperlake", "icelake", "tigerlake", "sapphirerapids", "emeraldrapids",
               "graniterapids", "rocketlake", "cannonlake", "znver4", "znver5", "x86-64-v4")
# ... and those of them with the 8-bit dot product: AVX-512 VNNI (``vpdpbusd`` on zmm), AVX-VNNI (on ymm)
AVX512_VNNI_CPUS = ("cascadelake", "cooperlake", "icelake", "tigerlake", "sapphirerapids", "emeraldrapids",
                    "graniterapids", "rocketlake", "znver4", "znver5")
AVX_VNNI_CPUS = ("alderlake", "raptorlake", "meteorlake", "arrowlake", "lunarlake", "sierraforest",
                 "grandridge", "sapphirerapids", "emeraldrapids", "graniterapids", "znver5")
AVX2_CPUS = ("haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake", "znver",
             "x86-64-v3")


def cpu_name_lanes(cpu: str) -> int:
    """float32 lanes of an x86 CPU known by its LLVM name alone: 16 (AVX-512), 8 (AVX2) or 4."""
    cpu = cpu.lower()
    if "avx512" in cpu or cpu.startswith(AVX512_CPUS):
        return 16
    return 8 if cpu.startswith(AVX2_CPUS) else 4


@lru_cache(maxsize=256)
def x86_vector_lanes(resolved: LLVMTarget) -> int:
    """float32 lanes of the widest vector unit of a resolved x86 target: 16 with AVX-512, 8 with AVX2
    (or AVX), else 4 (SSE). The feature string is read in order (``-mattr=-avx512f`` after the host's
    ``+avx512f`` is off); ``-mcpu`` goes by the CPU's name for what ``-mattr`` does not say
    (``-mcpu=x86-64-v3 -mattr=-avx512f`` is AVX2's 8 lanes, not SSE's 4)."""
    named = cpu_name_lanes(resolved.cpu)
    if not resolved.features:
        return named
    on = feature_switches(resolved.features)
    said = {item[1:] for item in resolved.features.split(",") if item[:1] in "+-"}
    # ``-mcpu=NAME -mattr=...``: the features are the user's alone, the rest is the named CPU's own
    if on.get("avx") is False:
        return 4
    if on.get("avx512f") if "avx512f" in said else named == 16:
        return 16
    if on.get("avx2") or on.get("avx") if said & {"avx2", "avx"} else named >= 8:
        return 8
    return 4


def cpu_name_features(cpu: str) -> str:
    """The feature string (``+avx,+avx2,...``) a CPU known by its name alone implies: the extensions of
    its vector width (``cpu_name_lanes``); llvmlite does not list a named CPU's own."""
    lanes = cpu_name_lanes(cpu)
    implied = _BASE_AVX512 if lanes == 16 else _BASE_AVX2 if lanes == 8 else ()
    name = cpu.lower()
    if lanes == 16 and name.startswith(AVX512_VNNI_CPUS):
        implied += ("avx512vnni",)
    if lanes >= 8 and name.startswith(AVX_VNNI_CPUS):
        implied += ("avxvnni",)
    return ",".join("+" + name for name in implied)


def code_features(target: LLVMTarget) -> list:
    """The x86 extensions (``X86_FEATURES`` names) that code built for ``target`` may use:
    its feature string read in order (``+avx2,-avx2`` ends off); for ``-mcpu`` alone, whose features
    llvmlite does not list, the host's when it is the host's CPU, else those its vector width implies
    (the names ``cpu_name_lanes`` knows). Empty for other architectures."""
    if not target.triple.startswith(X86_ARCHS):
        return []
    features = target.features
    if not features and target.cpu == host_cpu():
        features = host_features()
    on = feature_switches(features or cpu_name_features(target.cpu))
    return [name for name, _ in X86_FEATURES if on.get(name)]
