"""Resource limits, checked before anything is allocated (issue 20).

Two checks, each made in one place:

- every tensor type the graph builder creates (graph inputs, node outputs) must have a byte size that
  fits in a signed 64-bit integer, since kernels index and the plan offsets memory with ``int64``;
  a larger one (say a ``--shape`` of 10^7 x 10^7 x 10^7) is refused naming the input or node;
- what is about to be allocated for a model (a folded constant in the builder; the activation arena
  in the ``Module`` constructor, for compiled and loaded modules alike) must fit in the memory the
  system has available (``MemAvailable``, or the cgroup's limit when lower), so an oversized model
  is one sentence instead of the kernel's out-of-memory killer or a ``MemoryError`` traceback.
  ``NNVM_MEMORY_LIMIT`` (bytes; suffixes K, M, G) sets another ceiling.
"""

from __future__ import annotations

from nnvm import environment
from nnvm.errors import ResourceLimitError

MAX_BYTES = 2**63 - 1


def _read_int(path: str, key: str | None = None) -> int | None:
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    if key is None:
        text = text.strip()
        return int(text) if text.isdigit() else None
    for line in text.splitlines():
        if line.startswith(key + ":"):
            parts = line.split()
            return int(parts[1]) * (1024 if parts[-1] == "kB" else 1)
    return None


def _parse_size(text: str) -> int | None:
    text = text.strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in "KMGT" and text else text
    return int(digits) * scale if digits.isdigit() else None


def available_memory() -> int | None:
    """Bytes this process may still allocate: the smallest of ``MemAvailable``, the cgroup v2/v1 limit
    minus its usage, and ``NNVM_MEMORY_LIMIT``; None when none can be read (then nothing is refused)."""
    found = [_read_int("/proc/meminfo", "MemAvailable")]
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                          "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        cap, used = _read_int(limit), _read_int(usage)
        if cap is not None and used is not None and cap < MAX_BYTES:
            found.append(max(cap - used, 0))
    if environment.memory_limit():
        found.append(_parse_size(environment.memory_limit()))
    found = [f for f in found if f is not None]
    return min(found) if found else None


def _size(nbytes: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} bytes"


def check_type(ty, where: str) -> None:
    """Refuse a tensor type whose byte size does not fit in 64 bits (``where``: the input or node). A
    symbolic size is checked when a run binds its dims (the memory plan's allocation)."""
    nbytes = ty.nbytes
    if isinstance(nbytes, int) and nbytes > MAX_BYTES:
        raise ResourceLimitError(f"{where}: {ty} holds {ty.nbytes} bytes, more than 64-bit sizes allow")


def check_allocation(nbytes: int, what: str) -> None:
    """Refuse to allocate ``nbytes`` for ``what`` when more than the available memory."""
    if nbytes > MAX_BYTES:
        raise ResourceLimitError(f"{what} would need {nbytes} bytes, more than 64-bit sizes allow")
    free = available_memory()
    if free is not None and nbytes > free:
        raise ResourceLimitError(f"{what} would need {_size(nbytes)}, more than the {_size(free)} of memory "
                                 f"available")
