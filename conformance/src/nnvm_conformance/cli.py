"""``nnvm conformance``: the suite from the command line (``commands.py`` adds the subcommand to the
core's CLI through ``nnvm_register_commands``; this module runs it).

    nnvm conformance --target llvm                         table on the terminal
    nnvm conformance --target llvm --json                  the same results as JSON
    nnvm conformance --targets llvm,opencl --markdown docs/conformance.md   the cross-backend matrix

Exit status 0 only when every operator and model passes on every target; ``fail``, ``unsupported``
(unless ``--allow-unsupported``) and ``no case`` make it 1. Progress goes to stderr.
"""

from __future__ import annotations

import json
import sys

from nnvm.errors import Error
from nnvm_conformance.runner import FAIL, NO_CASE, UNSUPPORTED, Result


def _split(values) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out += [x.strip() for x in v.split(",") if x.strip()]
    return out


def run_suite(targets: list[str], ops: list[str] | None = None, models: list[str] | None = None,
              examples: int | None = None, progress=None) -> tuple[list[Result], list[str]]:
    """Every requested operator and model on every target; returns (results, operators with no case).

    ``ops=None`` means the whole standard set (plus any operator with a case); ``models=None`` all four.
    """
    from nnvm.target import parse_target
    from nnvm_conformance.cases import all_cases, missing_cases, ops_to_check
    from nnvm_conformance.models import MODELS, run_model
    from nnvm_conformance.runner import no_case, run_op

    for t in targets:  # an unknown target is the user's mistake: one sentence, before any work
        _ = parse_target(t).backend
    cases = all_cases()
    names = ops if ops is not None else ops_to_check()
    unknown = [m for m in (models or []) if m not in MODELS]
    if unknown:
        raise Error(f"unknown model {', '.join(unknown)}; known: {', '.join(MODELS)}")
    from nnvm.plugins import op_registry

    registered = op_registry()
    unknown = [op for op in names if op not in registered]
    if unknown:
        raise Error(f"unknown operator {', '.join(unknown)}; no installed operator set provides it")
    if examples is not None and examples < 1:
        raise Error(f"--examples must be at least 1, got {examples}")
    results = []
    for target in targets:
        for op in names:
            r = run_op(cases[op], target, examples) if op in cases else no_case(op, target)
            results.append(r)
            if progress:
                progress(r)
        for name in MODELS if models is None else models:
            r = run_model(name, target)
            results.append(r)
            if progress:
                progress(r)
    missing = missing_cases() if ops is None else [op for op in ops if op not in cases]
    return results, missing


def main(args) -> int:
    """Run the suite for the parsed ``nnvm conformance`` arguments; returns the exit status."""
    from nnvm_conformance import report

    targets = _split(args.target) + _split([args.targets] if args.targets else [])
    if not targets:
        raise Error("nnvm conformance needs a target: --target llvm, or --targets llvm,opencl")
    targets = list(dict.fromkeys(targets))
    ops = _split([args.ops]) if args.ops else None
    models = [] if args.no_models else (_split([args.models]) if args.models else None)

    def progress(r: Result) -> None:
        if not args.quiet:
            print(f"[{r.target}] {r.name}: {r.summary()} ({r.seconds:.1f} s)", file=sys.stderr, flush=True)

    results, missing = run_suite(targets, ops, models, args.examples, progress)
    if args.json:
        print(json.dumps(report.to_json(results, missing), indent=2))
    else:
        print(report.format_table(results))
        if missing:
            print(f"no conformance case for {len(missing)} operator(s): {', '.join(missing)}")
    if args.markdown:
        words = ["nnvm conformance", f"--targets {','.join(targets)}"]
        words += [f"--ops {','.join(ops)}"] if ops is not None else []
        words += ["--no-models"] if models == [] else [f"--models {','.join(models)}"] if models else []
        words += [f"--examples {args.examples}"] if args.examples else []
        command = " ".join(words + ["--markdown", args.markdown])
        report.write_markdown(args.markdown, report.markdown_section(results, command))
        print(f"wrote the table to {args.markdown}", file=sys.stderr)
    bad = {FAIL, NO_CASE} | (set() if args.allow_unsupported else {UNSUPPORTED})
    return 1 if any(r.status in bad for r in results) or (missing and ops is None) else 0

