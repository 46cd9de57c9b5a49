"""``python -m nnvm_backend_llvm_arm size [--target T] [--json]``: the device runtime's size on disk.

The runtime is ``nnvm-run`` (the core's C runtime, ``nnvm/runtime/c``), built with the cross compiler;
a device needs it plus the exported model file. The model's weights are in that file, not in the
runtime, so they are excluded. The thread pool each parallel model carries (``nnvm_pool.c``, compiled
into the model file) is listed for reference.
"""

from __future__ import annotations

import argparse
import json
import sys

from nnvm.errors import Error
from nnvm_backend_llvm import runtime_sizes
from nnvm_backend_llvm_arm.plugin import ARM_TARGETS

BUDGET_BYTES = 300 * 1024  # the size the original NNVM/TVM runtime claimed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nnvm_backend_llvm_arm",
                                     description="Facts about the Arm device runtime.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("size", help="bytes on disk of the nnvm-run device runtime, per target")
    p.add_argument("--target", choices=sorted(ARM_TARGETS), action="append",
                   help="one target (repeatable); default: all")
    p.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        sizes = {kind: runtime_sizes(ARM_TARGETS[kind]) for kind in args.target or sorted(ARM_TARGETS)}
    except Error as exc:
        print(f"nnvm: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(sizes, indent=2))
        return 0
    for kind, files in sizes.items():
        runtime = files["nnvm-run"]
        verdict = "within" if runtime <= BUDGET_BYTES else "OVER"
        print(f"{kind}: nnvm-run {runtime / 1024:.1f} KiB ({verdict} the {BUDGET_BYTES // 1024} KiB budget; "
              "weights excluded)")
        for name, size in files.items():
            if name != "nnvm-run":
                print(f"  compiled into each parallel model: {name} {size / 1024:.1f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
