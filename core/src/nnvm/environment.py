"""The environment variables nnvm reads, in one module: an overlay for the few switches users need.

Everything else is passed explicitly (``nnvm.Options``, keyword arguments). A variable is read when it
is needed, so a test or script can change it between two calls in one process; each is listed in
``VARIABLES`` with what it does, and the README's table says the same.

Still read elsewhere, until their modules take them from here (issue 38): ``NNVM_CACHE_DIR`` in
``runtime/host_kernels.py`` and ``runtime/crt.py``, ``NNVM_GPU_THREAD_ORDER`` in ``runtime/host_kernels.py``,
``NNVM_NUM_THREADS`` and ``NNVM_POOL_AFFINITY`` in ``runtime/threads.py`` (and the LLVM thread pool's
C code), ``NNVM_KERNEL_CACHE_DIR`` and ``NNVM_KERNEL_CACHE_MB`` in ``kernel_cache.py``.

``NNVM_X86_*`` are the CPU layer's A/B switches: ``Options.cpu_switches`` is how a program sets them;
the environment still overlays them for the benchmark scripts and the tests that set them, until those
pass options too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

VARIABLES = {
    "NNVM_CACHE_DIR": "where generated test models, compiled kernels and host builds are cached "
                      "(default ~/.cache/nnvm)",
    "NNVM_KERNEL_CACHE_DIR": "the kernel cache's own directory (off: none)",
    "NNVM_KERNEL_CACHE_MB": "the kernel cache's cap in MiB",
    "NNVM_NUM_THREADS": "threads of the CPU backends' thread pool",
    "NNVM_POOL_AFFINITY": "how the thread pool pins its threads",
    "NNVM_PLUGINS": "load only these entry points (comma-separated names) besides the built-ins",
    "NNVM_DISABLE_PLUGIN_AUTOLOAD": "1: load only the core's built-in plugins",
    "NNVM_MEMORY_LIMIT": "a memory ceiling below what the system has available",
    "NNVM_GPU_THREAD_ORDER": "reversed: GPU kernels run on the CPU with each block's threads in reverse "
                             "order",
}
CPU_SWITCH_PREFIX = "NNVM_X86_"


def _get(name: str, environ: Mapping | None) -> str:
    return (os.environ if environ is None else environ).get(name) or ""


def cache_dir(environ: Mapping | None = None) -> Path:
    """``$NNVM_CACHE_DIR``, else ``~/.cache/nnvm``: outside any checkout."""
    return Path(_get("NNVM_CACHE_DIR", environ) or Path.home() / ".cache" / "nnvm")


def plugin_autoload(environ: Mapping | None = None) -> bool:
    """False when ``NNVM_DISABLE_PLUGIN_AUTOLOAD`` is set (to anything but ``0``)."""
    return _get("NNVM_DISABLE_PLUGIN_AUTOLOAD", environ) in ("", "0")


def plugin_allow_list(environ: Mapping | None = None) -> set | None:
    """The entry point names ``NNVM_PLUGINS`` allows; None when it is unset (all of them)."""
    allow = _get("NNVM_PLUGINS", environ)
    return {a.strip() for a in allow.split(",") if a.strip()} if allow else None


def memory_limit(environ: Mapping | None = None) -> str:
    """``NNVM_MEMORY_LIMIT`` as written (``""`` when unset); ``nnvm.limits`` parses it."""
    return _get("NNVM_MEMORY_LIMIT", environ)


def cpu_switch(key: str, environ: Mapping | None = None) -> str:
    """The CPU switch ``key`` (``LAYOUT``) as ``NNVM_X86_<key>`` sets it; ``""`` when unset."""
    return _get(CPU_SWITCH_PREFIX + key, environ)
