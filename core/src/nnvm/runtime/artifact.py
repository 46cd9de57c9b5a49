"""The exported module file of the CPU targets: an ELF shared library followed by a 64-byte footer.

The footer lets a loader (``nnvm.load`` here, ``nnvm_module_load`` in the C runtime, ``c/nnvm_runtime.c``)
reject a file that is not for it *before* ``dlopen`` maps and runs its code: a module for another CPU, a
newer format, a truncated or corrupted copy. ELF loaders ignore bytes after the image, so the file stays
an ordinary shared library. Layout (little-endian)::

    offset  size  field
         0     8  magic "NNVMMOD\\0"
         8     4  format version (``FORMAT_VERSION``)
        12     4  CRC-32 (zlib's) of the payload: every byte before the footer
        16     8  payload size in bytes (the file size minus 64)
        24     2  e_machine of the ELF payload (62 x86-64, 183 aarch64, 40 arm)
        26     1  ELF class (1: 32-bit, 2: 64-bit)
        27     1  reserved, zero
        28     4  x86 features the code may use: bit i is ``CPU_FEATURES[i]`` (0: none recorded)
        32    32  target kind (``llvm``, ``aarch64``, ``armv7``), NUL padded

A newer format bumps the version; a reader refuses versions above its own. The C runtime's
``nnvm_runtime.c`` reads the same layout (and the same feature bits): change both together.

The feature bits exist because the default ``llvm`` target is the compiling machine's CPU: a module
exported on an AVX-512 machine and loaded on one without it would die of SIGILL in its first kernel.
Both loaders refuse it first, naming the features this CPU lacks.
"""

from __future__ import annotations

import functools
import os
import struct
import zlib

from nnvm.errors import ModelLoadError

MAGIC = b"NNVMMOD\0"
FORMAT_VERSION = 2  # 1: the ELF image alone (no footer); 2: this footer and the C entry point
FOOTER = struct.Struct("<8sIIQHBxI32s")
assert FOOTER.size == 64
ELF_MACHINES = {62: "x86-64", 183: "aarch64", 40: "32-bit Arm", 243: "RISC-V", 3: "x86", 2: "SPARC"}
_CHUNK = 1 << 22
# The x86 extensions LLVM may use in our kernels, as (LLVM feature name, Linux /proc/cpuinfo flag), in
# footer bit order; append only (c/nnvm_runtime.c tests the same bits with cpuid).
CPU_FEATURES = (
    ("sse4.1", "sse4_1"), ("sse4.2", "sse4_2"), ("avx", "avx"), ("avx2", "avx2"), ("fma", "fma"),
    ("f16c", "f16c"), ("avx512f", "avx512f"), ("avx512cd", "avx512cd"), ("avx512bw", "avx512bw"),
    ("avx512dq", "avx512dq"), ("avx512vl", "avx512vl"), ("avx512vnni", "avx512_vnni"),
    ("avx512bf16", "avx512_bf16"), ("avx512fp16", "avx512_fp16"), ("avxvnni", "avx_vnni"),
    ("amx-tile", "amx_tile"),
)


def is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _elf_ident(head: bytes) -> tuple[int, int] | None:
    """(ELF class, e_machine) of a little-endian ELF header, or None."""
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[5] != 1:
        return None
    return head[4], struct.unpack_from("<H", head, 18)[0]


def _crc32(f, size: int) -> int:
    crc = 0
    f.seek(0)
    left = size
    while left > 0:
        chunk = f.read(min(_CHUNK, left))
        if not chunk:
            break
        crc = zlib.crc32(chunk, crc)
        left -= len(chunk)
    return crc & 0xFFFFFFFF


def feature_mask(features) -> int:
    """The footer bits of the LLVM feature names ``features`` (names outside ``CPU_FEATURES`` add none)."""
    names = [name for name, _ in CPU_FEATURES]
    return sum(1 << names.index(f) for f in set(features) if f in names)


def seal(path: str, target_kind: str, features=()) -> None:
    """Append the footer to the ELF image at ``path`` (replacing a valid footer already there, as when
    a loaded module is exported again), recording the CPU ``features`` (LLVM names) its code may use."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        if size >= FOOTER.size:
            f.seek(size - FOOTER.size)
            if f.read(8) == MAGIC:
                size -= FOOTER.size
                f.truncate(size)
        f.seek(0)
        ident = _elf_ident(f.read(20))
        if ident is None:
            raise ModelLoadError(f"{path}: the exported library is not a little-endian ELF file")
        crc = _crc32(f, size)
        kind = target_kind.encode()[:32]
        f.seek(size)
        f.write(FOOTER.pack(MAGIC, FORMAT_VERSION, crc, size, ident[1], ident[0], feature_mask(features),
                            kind))


def check(path: str) -> dict:
    """Validate the footer, the payload's checksum and its ELF header; return the footer's fields
    (``version``, ``target``, ``machine``, ``elf_class``, ``payload_bytes``, ``features``: LLVM names).
    Raises ``ModelLoadError``
    with one sentence naming the file and what is wrong."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if size < FOOTER.size + 64:
            raise ModelLoadError(f"{path}: the file is only {size} bytes, too short for an exported nnvm "
                                 "module (truncated?)")
        f.seek(size - FOOTER.size)
        magic, version, crc, payload, machine, elf_class, mask, kind = FOOTER.unpack(f.read(FOOTER.size))
        if magic != MAGIC:
            raise ModelLoadError(f"{path}: no nnvm module footer at the end of the file: it is truncated, "
                                 "or was exported by an older nnvm (export it again)")
        if version > FORMAT_VERSION:
            raise ModelLoadError(f"{path}: module format v{version} is newer than this nnvm reads "
                                 f"(v{FORMAT_VERSION}); upgrade nnvm or export it again")
        if version < FORMAT_VERSION:
            raise ModelLoadError(f"{path}: module format v{version} is older than this nnvm reads "
                                 f"(v{FORMAT_VERSION}); export it again")
        if payload != size - FOOTER.size:
            raise ModelLoadError(f"{path}: the footer says {payload + FOOTER.size} bytes but the file has "
                                 f"{size}: it is truncated or corrupted")
        f.seek(0)
        ident = _elf_ident(f.read(20))
        if ident != (elf_class, machine):
            raise ModelLoadError(f"{path}: the ELF header does not match the module footer: the file is "
                                 "corrupted")
        if _crc32(f, payload) != crc:
            raise ModelLoadError(f"{path}: checksum mismatch: the file is corrupted")
    return {"version": version, "target": kind.rstrip(b"\0").decode(errors="replace"), "machine": machine,
            "elf_class": elf_class, "payload_bytes": payload,
            "features": [CPU_FEATURES[i][0] if i < len(CPU_FEATURES) else f"feature bit {i}"
                         for i in range(32) if mask >> i & 1]}


def host_lacks(features) -> list:
    """Those of ``features`` (LLVM names from ``CPU_FEATURES``) this CPU does not have, as the kernel
    reports them (``/proc/cpuinfo`` flags, which also reflect the OS saving AVX state), and any this
    nnvm does not know (a footer bit from a newer one: it cannot be checked, so it is not assumed);
    empty where the kernel does not say (not Linux), since then nothing can be checked."""
    have = _cpuinfo_flags()
    if have is None:
        return []
    flags = dict(CPU_FEATURES)
    return [f for f in features if f not in flags or flags[f] not in have]


@functools.cache
def _cpuinfo_flags() -> frozenset | None:
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), None)
    except OSError:
        return None
    return None if flags is None else frozenset(flags)


_HOST_MACHINES = {"x86_64": (62, 2), "amd64": (62, 2), "aarch64": (183, 2), "arm64": (183, 2),
                  "armv7l": (40, 1), "armv8l": (40, 1), "riscv64": (243, 2), "i686": (3, 1), "i386": (3, 1)}


def host_machine() -> int | None:
    """The ELF e_machine of this process's CPU (None for one not listed)."""
    found = host_elf()
    return found[0] if found else None


def host_elf() -> tuple[int, int] | None:
    """(e_machine, ELF class) of this process's CPU: what the core alone loads and builds the C runtime
    for, with no plugin installed; None for a CPU not listed."""
    import platform

    return _HOST_MACHINES.get(platform.machine().lower())


def machine_name(machine: int) -> str:
    return ELF_MACHINES.get(machine, f"ELF machine {machine}")
