"""``nnvm conformance``, added to the core's command line through ``nnvm_register_commands`` (entry point
group ``nnvm``): the core knows nothing of the suite, the suite brings its own subcommand."""

from __future__ import annotations

import nnvm
from nnvm.cli import Command


def add_arguments(p) -> None:
    p.add_argument("--target", action="append", help="target to check (repeatable)")
    p.add_argument("--targets", help="comma-separated targets: one column each (the cross-backend matrix)")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    p.add_argument("--markdown", metavar="PATH", help="write the matrix into PATH's generated section")
    p.add_argument("--ops", help="comma-separated operators (default: the whole standard set)")
    p.add_argument("--models", help="comma-separated models (default: all four)")
    p.add_argument("--no-models", action="store_true", help="operators only")
    p.add_argument("--examples", type=int, help="examples per operator (default: each operator's own)")
    p.add_argument("--allow-unsupported", action="store_true", help="exit 0 even if some are unsupported")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def run(args) -> int:
    from nnvm_conformance.cli import main

    return main(args)


@nnvm.hookimpl
def nnvm_register_commands(register):
    register(Command("conformance", "check every standard operator and four models on a target",
                     add_arguments, run))
