"""Just enough ELF to read exported symbols' bytes from a shared library this host cannot ``dlopen``.

``nnvm.load`` of an Arm module on x86 needs the module's graph and weights blobs; they are plain
bytes behind the dynamic symbols ``nnvm_blob_*``, so reading the section headers and ``.dynsym`` of
the file suffices (little-endian ELF32 and ELF64: aarch64, armv7 and riscv64 Linux).
"""

from __future__ import annotations

import struct

from nnvm.errors import ModelLoadError

SHT_DYNSYM = 11


def elf_header(path: str) -> tuple[int, int] | None:
    """(ELF class, e_machine) of a little-endian ELF file, or None when ``path`` is not one."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[5] != 1:
        return None
    return head[4], struct.unpack_from("<H", head, 18)[0]


class ElfSymbols:
    """The dynamic symbols of an ELF file and the file bytes they point to."""

    def __init__(self, path: str):
        self.path = path
        with open(path, "rb") as f:
            self.data = f.read()
        d = self.data
        is64 = d[4] == 2
        if is64:
            shoff, = struct.unpack_from("<Q", d, 0x28)
            shentsize, shnum = struct.unpack_from("<HH", d, 0x3A)
        else:
            shoff, = struct.unpack_from("<I", d, 0x20)
            shentsize, shnum = struct.unpack_from("<HH", d, 0x2E)
        sections = []  # (type, addr, offset, size, link)
        for k in range(shnum):
            at = shoff + k * shentsize
            if is64:
                _, typ, _, addr, off, size, link = struct.unpack_from("<IIQQQQI", d, at)
            else:
                _, typ, _, addr, off, size, link = struct.unpack_from("<IIIIIII", d, at)
            sections.append((typ, addr, off, size, link))
        self.symbols: dict = {}  # name -> (value, section index)
        self.sections = sections
        for typ, _, off, size, link in sections:
            if typ != SHT_DYNSYM:
                continue
            str_off = sections[link][2]
            entsize = 24 if is64 else 16
            for at in range(off, off + size, entsize):
                if is64:
                    name, _, _, shndx, value, _ = struct.unpack_from("<IBBHQQ", d, at)
                else:
                    name, value, _, _, _, shndx = struct.unpack_from("<IIIBBH", d, at)
                end = d.index(b"\0", str_off + name)
                self.symbols[d[str_off + name:end].decode(errors="replace")] = (value, shndx)
        if not self.symbols:
            raise ModelLoadError(f"{path}: an ELF file without dynamic symbols, not an exported nnvm module")

    def read(self, name: str, size: int) -> memoryview:
        """``size`` bytes at symbol ``name`` (KeyError when the file does not define it)."""
        value, shndx = self.symbols[name]
        if not 0 < shndx < len(self.sections):
            raise KeyError(name)
        _, addr, off, sec_size, _ = self.sections[shndx]
        start = off + value - addr
        if value < addr or value - addr + size > sec_size:
            raise ModelLoadError(f"{self.path}: symbol {name} lies outside its section; the file is corrupt")
        return memoryview(self.data)[start:start + size]
