"""The exported module file of the CPU targets: an ELF shared library, the ISA features its code needs,
and a 64-byte footer.

The footer lets a loader (``nnvm.load`` here, ``nnvm_module_load`` in the C runtime, ``c/nnvm_runtime.c``)
reject a file that is not for it *before* ``dlopen`` maps and runs its code: a module for another CPU, a
CPU without an extension the code uses, a newer format, a truncated or corrupted copy. ELF loaders ignore
bytes after the image, so the file stays an ordinary shared library. Layout (little-endian)::

    [ELF image: payload bytes][feature list: n bytes][footer: 64 bytes]

    footer offset  size  field
               0     8  magic "NNVMMOD\\0"
               8     4  format version (``FORMAT_VERSION``)
              12     4  CRC-32 (zlib's) of every byte before the footer (image and feature list)
              16     8  payload size in bytes (the ELF image alone)
              24     2  e_machine of the ELF image (62 x86-64, 183 aarch64, 40 arm, 243 RISC-V)
              26     1  ELF class (1: 32-bit, 2: 64-bit)
              27     1  reserved, zero
              28     4  n, the feature list's size in bytes
              32    32  target kind (``llvm``, ``aarch64``, ``riscv64``), NUL padded

The feature list is ASCII, ``name=probe`` items joined by commas: each ISA extension the code may use
(the backend's ``code_features``: AVX-512 on x86, SVE on Arm, V on RISC-V) with how a Linux host shows
it has it: ``cpuinfo:FLAG`` (a word of ``/proc/cpuinfo``'s ``flags`` or ``Features`` line) or
``hwcap:BIT``/``hwcap2:BIT`` (a bit of the kernel's ``AT_HWCAP``/``AT_HWCAP2``, which an emulator
reports for the CPU it emulates). The backend declares them, so this module knows no architecture's
extensions and a loader with the core alone checks any. A module exported on an AVX-512 machine and
loaded on one without it would die of SIGILL in its first kernel: both loaders refuse it first, naming
what this CPU lacks.

A newer format bumps the version; a reader refuses versions above its own and below
``OLDEST_FORMAT_VERSION``. A file is written with the oldest version that reads it (``seal``). The C runtime's
``nnvm_runtime.c`` reads the same layout and the same probes: change both together.
"""

from __future__ import annotations

import functools
import os
import platform
import struct
import zlib

from nnvm.errors import ModelLoadError

MAGIC = b"NNVMMOD\0"
# 1: the ELF image alone; 2: a footer with x86 feature bits; 3: the feature list of any architecture;
# 4: a module with symbolic dims (its plan's structure and shape programs: ``nnvm.runtime.symbolic``)
FORMAT_VERSION = 4  # the newest this nnvm reads and writes
OLDEST_FORMAT_VERSION = 3  # the oldest it reads: v3 is v4 without symbolic modules
# A bound module is written as v3, the oldest version that reads it, so runtimes built before symbolic
# modules still run it; a symbolic one as v4, which they refuse with one sentence ("newer").
BOUND_FORMAT_VERSION = 3
FOOTER = struct.Struct("<8sIIQHBxI32s")
assert FOOTER.size == 64
MAX_FEATURE_BYTES = 4096
# ELF machines by number, for messages and for this host's own (``host_machine``): what the core loads
# with no plugin installed. A backend for another CPU needs no entry: its modules carry their machine.
ELF_MACHINES = {62: "x86-64", 183: "aarch64", 40: "32-bit Arm", 243: "RISC-V", 3: "x86", 2: "SPARC"}
_HOST_MACHINES = {"x86_64": (62, 2), "amd64": (62, 2), "aarch64": (183, 2), "arm64": (183, 2),
                  "armv7l": (40, 1), "armv8l": (40, 1), "riscv64": (243, 2), "i686": (3, 1), "i386": (3, 1)}
_AT_HWCAP, _AT_HWCAP2 = 16, 26
_CHUNK = 1 << 22


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


def feature_list(features: dict) -> bytes:
    """The footer's feature list of ``{name: probe}`` (the backend's ``code_features``)."""
    items = []
    for name, probe in sorted(dict(features).items()):
        if not name or any(c in name + probe for c in ",=\0") or not probe.isascii():
            raise ValueError(f"feature {name!r} with probe {probe!r} cannot be recorded")
        items.append(f"{name}={probe}")
    text = ",".join(items).encode()
    if len(text) > MAX_FEATURE_BYTES:
        raise ValueError(f"{len(items)} features take {len(text)} bytes, more than {MAX_FEATURE_BYTES}")
    return text


def parse_feature_list(text: bytes) -> dict:
    """``{name: probe}`` from a footer's feature list (an item without a probe cannot be checked)."""
    found = {}
    for item in text.decode("ascii", errors="replace").split(","):
        if item:
            name, _, probe = item.partition("=")
            found[name] = probe
    return found


def seal(path: str, target_kind: str, features: dict | None = None, version: int | None = None) -> None:
    """Append the feature list and the footer to the ELF image at ``path`` (replacing those already there,
    as when a loaded module is exported again: None keeps its features and its version); ``features`` is
    ``{name: probe}``, the ISA extensions its code may use and how a host shows it has each; ``version``
    the format version (``BOUND_FORMAT_VERSION`` for a new file when None)."""
    size = os.path.getsize(path)
    kept_version = BOUND_FORMAT_VERSION
    with open(path, "r+b") as f:
        if size >= FOOTER.size:
            f.seek(size - FOOTER.size)
            old = f.read(FOOTER.size)
            if old[:8] == MAGIC:
                payload, listed = FOOTER.unpack(old)[3], FOOTER.unpack(old)[6]
                if payload + listed == size - FOOTER.size and listed <= MAX_FEATURE_BYTES:
                    f.seek(payload)
                    kept = parse_feature_list(f.read(listed))  # a loaded module exported again keeps them
                    features = kept if features is None else features
                    kept_version = FOOTER.unpack(old)[1]
                    size = payload
                else:
                    size -= FOOTER.size
                f.truncate(size)
        f.seek(0)
        ident = _elf_ident(f.read(20))
        if ident is None:
            raise ModelLoadError(f"{path}: the exported library is not a little-endian ELF file")
        listed = feature_list(features or {})
        f.seek(size)
        f.write(listed)
        crc = _crc32(f, size + len(listed))
        f.seek(size + len(listed))
        f.write(FOOTER.pack(MAGIC, kept_version if version is None else version, crc, size, ident[1],
                            ident[0], len(listed), target_kind.encode()[:32]))


def check(path: str) -> dict:
    """Validate the footer, the checksum and the ELF header; return the footer's fields (``version``,
    ``target``, ``machine``, ``elf_class``, ``payload_bytes``, ``features``: the names, ``probes``:
    ``{name: probe}``). Raises ``ModelLoadError`` with one sentence naming the file and what is wrong."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if size < FOOTER.size + 64:
            raise ModelLoadError(f"{path}: the file is only {size} bytes, too short for an exported nnvm "
                                 "module (truncated?)")
        f.seek(size - FOOTER.size)
        magic, version, crc, payload, machine, elf_class, listed, kind = FOOTER.unpack(f.read(FOOTER.size))
        if magic != MAGIC:
            raise ModelLoadError(f"{path}: no nnvm module footer at the end of the file: it is truncated, "
                                 "or was exported by an older nnvm (export it again)")
        if version > FORMAT_VERSION:
            raise ModelLoadError(f"{path}: module format v{version} is newer than this nnvm reads "
                                 f"(v{FORMAT_VERSION}); upgrade nnvm or export it again")
        if version < OLDEST_FORMAT_VERSION:
            raise ModelLoadError(f"{path}: module format v{version} is older than this nnvm reads "
                                 f"(v{OLDEST_FORMAT_VERSION} to v{FORMAT_VERSION}); export it again")
        if listed > MAX_FEATURE_BYTES or payload + listed != size - FOOTER.size:
            raise ModelLoadError(f"{path}: the footer says {payload + listed + FOOTER.size} bytes but the "
                                 f"file has {size}: it is truncated or corrupted")
        f.seek(0)
        ident = _elf_ident(f.read(20))
        if ident != (elf_class, machine):
            raise ModelLoadError(f"{path}: the ELF header does not match the module footer: the file is "
                                 "corrupted")
        if _crc32(f, payload + listed) != crc:
            raise ModelLoadError(f"{path}: checksum mismatch: the file is corrupted")
        f.seek(payload)
        probes = parse_feature_list(f.read(listed))
    return {"version": version, "target": kind.rstrip(b"\0").decode(errors="replace"), "machine": machine,
            "elf_class": elf_class, "payload_bytes": payload, "features": sorted(probes), "probes": probes}


def host_lacks(probes: dict) -> list:
    """The names of ``probes`` (``{name: probe}``) this CPU does not have, as the kernel reports them
    (``/proc/cpuinfo`` flags, which also reflect the OS saving AVX state; ``AT_HWCAP`` bits), and any
    whose probe this nnvm cannot read (a newer kind: it cannot be checked, so it is not assumed); none
    where the kernel does not say (not Linux), since then nothing can be checked."""
    return [name for name, probe in dict(probes).items() if not _host_has(probe)]


def _host_has(probe: str) -> bool:
    how, _, what = probe.partition(":")
    if how == "cpuinfo":
        flags = _cpuinfo_flags()
        return flags is None or what in flags
    if how in ("hwcap", "hwcap2") and what.isdigit():
        words = _hwcaps()
        word = words.get(_AT_HWCAP if how == "hwcap" else _AT_HWCAP2, 0) if words is not None else None
        return word is None or bool(word >> int(what) & 1)
    return False


@functools.cache
def _cpuinfo_flags() -> frozenset | None:
    """The words of ``/proc/cpuinfo``'s ``flags`` (x86) or ``Features`` (Arm) line; None where absent."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith(("flags", "Features"))), None)
    except OSError:
        return None
    return None if flags is None else frozenset(flags)


@functools.cache
def _hwcaps() -> dict | None:
    """The auxiliary vector's entries (``AT_HWCAP``...) of this process; None where unreadable."""
    try:
        with open("/proc/self/auxv", "rb") as f:
            data = f.read()
    except OSError:
        return None
    word = struct.calcsize("@L")
    data = data[:len(data) - len(data) % (2 * word)]
    return dict(struct.iter_unpack("@LL", data))


def host_machine() -> int | None:
    """The ELF e_machine of this process's CPU (None for one not listed)."""
    found = _HOST_MACHINES.get(platform.machine().lower())
    return found[0] if found else None


def host_elf() -> tuple[int, int] | None:
    """(e_machine, ELF class) of this process's CPU: what the C runtime for this machine is built for
    when no backend is installed; None for a CPU not listed."""
    return _HOST_MACHINES.get(platform.machine().lower())


def machine_name(machine: int) -> str:
    return ELF_MACHINES.get(machine, f"ELF machine {machine}")
