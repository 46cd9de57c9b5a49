"""The default team size of parallel kernels: one thread per physical core.

Compiled kernels read ``NNVM_NUM_THREADS`` once, at their first parallel loop (the LLVM backends'
``nnvm_llvm_num_threads``), and fall back to the OpenMP runtime's default, which counts logical CPUs:
two threads per core with SMT, and sibling hyper-threads only fight over one core's vector units.
Counting physical cores is easy here and awkward in generated code, so the Python runtime sets the
variable before it hands out the first kernel (``kernel_from_address``), for modules compiled in this
process and ones ``nnvm.load`` reads alike. ``NNVM_NUM_THREADS`` or ``OMP_NUM_THREADS`` set by the
user win.
"""

from __future__ import annotations

import glob
import os

ENV = "NNVM_NUM_THREADS"


def physical_cores() -> int:
    """Distinct (package, core) pairs among the CPUs this process may run on; the CPU count if the
    topology cannot be read (not Linux, no sysfs)."""
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        allowed = None
    cores = set()
    for path in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology/core_id"):
        cpu_dir = os.path.dirname(os.path.dirname(path))
        cpu = int(os.path.basename(cpu_dir)[3:])
        if allowed is not None and cpu not in allowed:
            continue
        try:
            with open(path) as f:
                core = f.read().strip()
            with open(os.path.join(cpu_dir, "topology", "physical_package_id")) as f:
                package = f.read().strip()
        except OSError:
            continue
        cores.add((package, core))
    if cores:
        return len(cores)
    return len(allowed) if allowed else (os.cpu_count() or 1)


def set_default_threads() -> None:
    """Set ``NNVM_NUM_THREADS`` to the physical core count unless the user chose a team size."""
    if not os.environ.get(ENV) and not os.environ.get("OMP_NUM_THREADS"):
        os.environ[ENV] = str(physical_cores())
