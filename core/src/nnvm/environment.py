"""The environment variables nnvm reads, all in this module: the eight a user sets per shell.

Everything else is passed explicitly: ``nnvm.Options`` and keyword arguments for a compile (the CPU layer's
A/B switches included: ``Options.cpu_switches``), command-line flags for ``nnvm``. Each variable is read
when it is needed, so a test or script can change it between two calls in one process; each is listed in
``VARIABLES`` with what it does, and the README's table says the same (``core/tests/test_environment.py``
checks both, and that nothing else in the core or a plugin reads an ``NNVM_*`` variable).

One reader lives outside Python, on purpose: the LLVM backends' thread pool (``nnvm_pool.c``) reads
``NNVM_NUM_THREADS`` and ``NNVM_POOL_AFFINITY`` itself, because it also runs in exported modules loaded by
the C runtime with no Python in the process (``nnvm-run``, ``nnvm_module_load``). The Python runtime sets
``NNVM_NUM_THREADS`` before the first kernel runs (``nnvm.runtime.threads``) and checks
``NNVM_POOL_AFFINITY`` here first, so both mean the same with or without Python.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

VARIABLES = {
    "NNVM_CACHE_DIR": "where generated test models, compiled kernels and host builds are cached "
                      "(default ~/.cache/nnvm)",
    "NNVM_KERNEL_CACHE_DIR": "the kernel cache's own directory (off: none)",
    "NNVM_NUM_THREADS": "threads of the CPU backends' thread pool (also read by nnvm_pool.c)",
    "NNVM_POOL_AFFINITY": "how the thread pool deals a loop's chunks (also read by nnvm_pool.c)",
    "NNVM_PLUGINS": "load only these entry points (comma-separated names) besides the built-ins",
    "NNVM_DISABLE_PLUGIN_AUTOLOAD": "1: load only the core's built-in plugins",
    "NNVM_MEMORY_LIMIT": "a memory ceiling below what the system has available",
    "NNVM_GPU_THREAD_ORDER": "reversed: GPU kernels run on the CPU with each block's threads in reverse "
                             "order",
}
NUM_THREADS = "NNVM_NUM_THREADS"  # the name the runtime sets for the thread pool (nnvm.runtime.threads)


def _get(name: str, environ: Mapping | None) -> str:
    assert name in VARIABLES, name  # a new variable is listed (and documented) first
    return (os.environ if environ is None else environ).get(name) or ""


def cache_dir(environ: Mapping | None = None) -> Path:
    """``$NNVM_CACHE_DIR``, else ``~/.cache/nnvm``: outside any checkout."""
    return Path(_get("NNVM_CACHE_DIR", environ) or Path.home() / ".cache" / "nnvm")


def kernel_cache_dir(environ: Mapping | None = None) -> Path | None:
    """``$NNVM_KERNEL_CACHE_DIR`` (``off``, ``0`` or ``none``: None, no kernel cache), else
    ``cache_dir()/kernels``."""
    own = _get("NNVM_KERNEL_CACHE_DIR", environ)
    if own.lower() in ("0", "off", "none"):
        return None
    return Path(own) if own else cache_dir(environ) / "kernels"


def num_threads(environ: Mapping | None = None) -> str:
    """``NNVM_NUM_THREADS`` as written (``""`` when unset); ``nnvm.runtime.threads`` parses it."""
    return _get("NNVM_NUM_THREADS", environ)


def pool_affinity(environ: Mapping | None = None) -> str:
    """``NNVM_POOL_AFFINITY`` as written (``""`` when unset); ``nnvm.runtime.threads`` checks it."""
    return _get("NNVM_POOL_AFFINITY", environ)


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


def gpu_threads_reversed(environ: Mapping | None = None) -> bool:
    """Whether ``NNVM_GPU_THREAD_ORDER`` is ``reversed`` (the CPU runner of GPU kernels then runs each
    block's threads in reverse order by default; ``forward``, the default, otherwise)."""
    return _get("NNVM_GPU_THREAD_ORDER", environ).strip().lower() == "reversed"
