"""A persistent cache of compiled kernels, shared by every process of a user (``~/.cache/nnvm/kernels``).

A second compile of a model, in a new process, should not lower and optimize its kernels again. The
compiler asks the cache for each distinct kernel by a key (``kernel_key``) that holds everything the
generated code depends on: the group's workload (operators, attributes, shapes, dtypes, which values are
outputs), the schedule (template, revision and config, or "untemplated"), the CPU layer's A/B switches,
the backend's identity for the target (``Backend.kernel_identity``: resolved triple, CPU and features,
LLVM's version) and a hash of the compiler's own source (``source_fingerprint``), so editing the code
that generates code invalidates every entry without anyone remembering to bump a version.

What an entry holds is the backend's business (bytes). On disk each entry is one file::

    MAGIC (8 bytes) | payload length (8 bytes, little endian) | SHA-256 of the payload (32) | payload

written under a temporary name in the same directory and renamed into place, so a reader never sees
half a file and concurrent writers of one key simply race to an identical result. A file that is
truncated, has another magic or a wrong checksum is treated as missing (deleted, rebuilt, written again):
a corrupt cache costs time, never a crash or a wrong answer. A hit refreshes the file's modification
time; when the directory outgrows its cap, ``evict`` deletes the least recently used entries.

The location is chosen at the top-level entry (``nnvm.compile``, the CLI: ``default_kernel_cache``)
and passed down as a ``KernelCache``; nothing below reads the environment.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

from nnvm import environment

MAGIC = b"NNVMKC1\n"
_HEADER = len(MAGIC) + 8 + 32
DEFAULT_MAX_BYTES = 2 * 1024**3  # 2 GiB: a few hundred models' kernels
SUFFIX = ".kernel"


class KernelCache:
    """Kernels by key in ``directory`` (created on first write), at most about ``max_bytes`` of them."""

    def __init__(self, directory: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES):
        self.directory = Path(directory)
        self.max_bytes = int(max_bytes)

    def __repr__(self) -> str:
        return f"KernelCache({str(self.directory)!r}, max_bytes={self.max_bytes})"

    def path(self, key: str) -> Path:
        digest = hashlib.sha256(key.encode()).hexdigest()
        return self.directory / digest[:2] / f"{digest[2:]}{SUFFIX}"

    def get(self, key: str) -> bytes | None:
        """The payload stored under ``key``, or None (missing, truncated or corrupt: then deleted)."""
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return None
        payload = _unframe(data)
        if payload is None:
            _unlink(path)
            return None
        try:
            os.utime(path)  # least recently used goes first when the cache is evicted
        except OSError:
            pass
        return payload

    def put(self, key: str, payload: bytes) -> None:
        """Store ``payload`` under ``key``: written to a temporary file, then renamed into place. A cache
        that cannot be written (read-only, disk full) is skipped: it only costs the next compile time."""
        path = self.path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=path.parent)
        except OSError:
            return
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_frame(payload))
            os.replace(tmp, path)
        except OSError:
            _unlink(Path(tmp))

    def entries(self) -> list[tuple[float, int, Path]]:
        """``(modification time, size, path)`` of every entry."""
        out = []
        for path in self.directory.glob(f"??/*{SUFFIX}"):
            try:
                st = path.stat()
            except OSError:  # evicted by another process meanwhile
                continue
            out.append((st.st_mtime, st.st_size, path))
        return out

    def size(self) -> int:
        return sum(size for _, size, _ in self.entries())

    def evict(self) -> int:
        """When the entries exceed ``max_bytes``, delete the least recently used down to 80% of it (so the
        next few compiles do not evict again). Returns the bytes deleted. Left-over temporary files of a
        writer that died are removed once they are an hour old."""
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        removed = 0
        if total > self.max_bytes:
            for _, size, path in sorted(entries):
                if total - removed <= 0.8 * self.max_bytes:
                    break
                if _unlink(path):
                    removed += size
        _remove_stale_temporaries(self.directory)
        return removed

    def clear(self) -> None:
        """Delete every entry."""
        for _, _, path in self.entries():
            _unlink(path)


def _frame(payload: bytes) -> bytes:
    return MAGIC + len(payload).to_bytes(8, "little") + hashlib.sha256(payload).digest() + payload


def _unframe(data: bytes) -> bytes | None:
    if len(data) < _HEADER or not data.startswith(MAGIC):
        return None
    size = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "little")
    digest = data[len(MAGIC) + 8:_HEADER]
    payload = data[_HEADER:]
    if len(payload) != size or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except OSError:
        return False


def _remove_stale_temporaries(directory: Path, age_seconds: float = 3600.0) -> None:
    now = time.time()
    for tmp in directory.glob(f"??/.tmp-*{SUFFIX}"):
        try:
            if now - tmp.stat().st_mtime > age_seconds:
                tmp.unlink()
        except OSError:
            pass


def default_kernel_cache(environ=None) -> KernelCache | None:
    """The cache a top-level entry uses: ``$NNVM_KERNEL_CACHE_DIR`` (``off`` or ``0``: none), else
    ``$NNVM_CACHE_DIR/kernels``, else ``~/.cache/nnvm/kernels`` (``nnvm.environment``), capped at
    ``DEFAULT_MAX_BYTES`` (a program wanting another cap passes ``KernelCache(directory, max_bytes)``).
    Read here, at the entry, and passed down."""
    directory = environment.kernel_cache_dir(environ)
    return None if directory is None else KernelCache(directory, DEFAULT_MAX_BYTES)


def source_fingerprint(*packages, leave_out: tuple = ()) -> str:
    """A hash of the Python (and C) source files of ``packages`` (imported packages, or single-file
    modules): part of every kernel key, so a change to the code that generates kernels never serves a
    stale one. ``leave_out``: paths relative to a package (a file, or a folder with everything in it)
    that generate no kernel code, so editing them keeps the cache warm."""
    digest = hashlib.sha256()
    for package in packages:
        if hasattr(package, "__path__"):
            root = Path(package.__file__).parent
            files = sorted(p for p in root.rglob("*") if p.suffix in (".py", ".c", ".h") and p.is_file()
                           and not _left_out(p.relative_to(root), leave_out))
        else:
            root = Path(package.__file__).parent
            files = [Path(package.__file__)]
        for path in files:
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _left_out(relative: Path, leave_out: tuple) -> bool:
    return any(relative == Path(entry) or Path(entry) in relative.parents for entry in leave_out)


def kernel_key(workload: str, outputs: list, schedule: dict, switches: dict, backend_identity: str,
               compiler: str) -> str:
    """The cache key of one kernel: every input the generated code depends on, as one JSON string."""
    return json.dumps({"workload": workload, "outputs": outputs, "schedule": schedule, "switches": switches,
                       "backend": backend_identity, "compiler": compiler}, sort_keys=True, default=str)
