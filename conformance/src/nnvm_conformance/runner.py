"""Running cases on a target: operators against numpy, whole models against onnxruntime.

An operator's examples are compiled together, as one graph with one node per example, so a target
pays its per-module cost (an LLVM module, an OpenCL program) once per operator rather than once per
example; the graph is compiled at ``opt_level=0`` so no pass rewrites the operator away (batch norm
into a multiply-add, dropout into nothing) and the target runs the operator's own compute. If the
graph does not compile, each example is compiled alone to say which ones fail.

Outcomes: ``pass``; ``fail`` (wrong numbers, a wrong shape or dtype, or an error that is not an
"unsupported" one: the result names the example and the largest error); ``unsupported`` (compile
raised an ``nnvm.UnsupportedOperatorError``: the target declines something; a reported outcome, never
a pass and never a silent skip); ``no case`` (an operator of the standard set the suite has no case
for).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from nnvm_conformance.case import Comparison, Example, OpCase, compare

PASS, FAIL, UNSUPPORTED, NO_CASE = "pass", "fail", "unsupported", "no case"
MODEL_RTOL = 1e-4  # max |nnvm - onnxruntime| / max |onnxruntime| over the output


@dataclass
class Result:
    """One operator (or model) on one target. ``max_error`` is the largest absolute difference from
    the reference over every example (for models: relative to the output's largest magnitude)."""

    name: str
    target: str
    status: str
    max_error: float | None = None
    examples: int = 0
    failing: str = ""  # the failing (or unsupported) example: shapes, dtypes, attributes
    message: str = ""
    seconds: float = 0.0
    kind: str = "op"

    def to_json(self) -> dict:
        out = asdict(self)
        if out["max_error"] is not None and not np.isfinite(out["max_error"]):
            out["max_error"] = None if np.isnan(out["max_error"]) else str(out["max_error"])
        return out

    def summary(self) -> str:
        """One line: the status, then the error or the reason."""
        if self.status == PASS and self.kind == "model":
            return f"pass (relative error {self.max_error:.3g})"
        if self.status == PASS:
            note = f"; {self.message}" if self.message else ""  # examples left out, say
            return f"pass (max error {self.max_error:.3g}, {self.examples} examples{note})"
        if self.status == FAIL:
            return f"FAIL {self.failing}: {self.message}"
        if self.status == UNSUPPORTED:
            return f"unsupported: {self.message}"
        return self.message or self.status


def is_unsupported(exc: BaseException) -> bool:
    """Whether ``exc`` is a target declining something: a reported outcome, not a bug.

    Only an ``nnvm.UnsupportedOperatorError`` (or a subclass) declines; any other error, whatever its
    message says, is a failure, so a crash in the compiler never hides behind the word "unsupported".
    """
    from nnvm.errors import UnsupportedOperatorError

    return isinstance(exc, UnsupportedOperatorError)


def draw_examples(case: OpCase, count: int | None = None) -> list[Example]:
    """The case's first ``count`` distinct examples, drawn by Hypothesis from the operator's own seed.

    The same package versions give the same examples on every run and every machine.
    """
    from hypothesis import HealthCheck, Phase, given, seed, settings

    count = count or case.count
    found: list[Example] = []
    seen: set = set()

    @settings(max_examples=count * 3, database=None, derandomize=False, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck), print_blob=False)
    @seed(case.seed())
    @given(case.examples)
    def collect(example):
        key = (example.describe(), tuple(a.tobytes() for a in example.inputs))
        if key not in seen and len(found) < count:
            seen.add(key)
            found.append(example)

    collect()
    return found


def _build_graph(op: str, examples: list[Example], wants: list[list]):
    from nnvm.graph.builder import GraphBuilder

    b = GraphBuilder(name=f"conformance_{op}", fold_constants=False)
    feeds = {}
    for k, (ex, want) in enumerate(zip(examples, wants)):
        names = []
        for j, a in enumerate(ex.inputs):
            if j in ex.constants:
                names.append(b.param(f"e{k}_w{j}", a))
                continue
            names.append(b.input(f"e{k}_x{j}", a.shape, str(a.dtype)))
            feeds[names[-1]] = a
        outputs = [f"e{k}_y{i}" for i in range(len(want))]
        outs = b.node(op, names, ex.node_attrs, name=f"e{k}", outputs=outputs)
        for o in outs:
            b.output(o)
    return b.build(), feeds


def _compile(graph, target: str):
    import nnvm

    # constant weights: the optimizing pipeline, so the paths a model's weights take are the ones checked
    return nnvm.compile(graph, target=target, opt_level=3 if graph.params else 0)


def _error_result(case: OpCase, target: str, example: Example, exc: BaseException) -> Result:
    status = UNSUPPORTED if is_unsupported(exc) else FAIL
    message = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return Result(case.op, target, status, None, 1, example.describe(), message)


def run_op(case: OpCase, target: str, count: int | None = None) -> Result:
    """Every example of ``case`` compiled for ``target``, run, and compared with the reference. Examples
    in a dtype the target's backend declares it has no type for are left out, and the result says so."""
    start = time.perf_counter()
    examples, wants, left_out = target_examples(case, target, count)
    declined = _unsupported_dtypes(target)
    if left_out and not examples:
        return Result(case.op, target, UNSUPPORTED, None, left_out, draw_examples(case, count)[0].describe(),
                      f"every example uses a dtype {target} has no type for ({', '.join(sorted(declined))})")
    try:
        graph, feeds = _build_graph(case.op, examples, wants)
        mod = _compile(graph, target)
        outs = mod.run(**feeds)
    except Exception:  # find out which examples fail, one compile each
        result = _one_by_one(case, target, examples, wants, start)
    else:
        result = _judge(case, target, examples, wants, outs)
        result.seconds = time.perf_counter() - start
    if left_out:
        note = f"{left_out} example(s) in {', '.join(sorted(declined))} left out: {target} has no such type"
        result.message = f"{result.message}; {note}" if result.message else note
    return result


def target_examples(case: OpCase, target: str, count: int | None = None) -> tuple[list, list, int]:
    """(examples, their reference outputs, how many were left out): the case's examples but those in a
    dtype the backend of ``target`` declares it has no type for."""
    examples = draw_examples(case, count)
    wants = [[np.asarray(w) for w in case.reference(list(ex.inputs), dict(ex.attrs))] for ex in examples]
    declined = _unsupported_dtypes(target)
    kept = [(ex, w) for ex, w in zip(examples, wants)
            if not ({str(a.dtype) for a in ex.inputs} | set(case.expected_dtypes(ex, w))) & declined]
    return [ex for ex, _ in kept], [w for _, w in kept], len(examples) - len(kept)


def compile_case(case: OpCase, target: str, count: int | None = None):
    """The module ``run_op`` runs for ``case`` on ``target`` (every example it keeps, one graph), compiled
    only: for checks of what a target makes of the case (its kernels' source); None where none is kept."""
    examples, wants, _ = target_examples(case, target, count)
    return _compile(_build_graph(case.op, examples, wants)[0], target) if examples else None


def _unsupported_dtypes(target: str) -> set:
    """The dtypes the backend of ``target`` declares it has no type for (``Backend.unsupported_dtypes``)."""
    from nnvm.plugins import backends
    from nnvm.target import parse_target

    found = backends().get(parse_target(target).kind)
    return set(getattr(found[1], "unsupported_dtypes", ())) if found else set()


def _judge(case: OpCase, target: str, examples, wants, outs) -> Result:
    worst: tuple | None = None  # (ratio, error, example, comparison)
    max_error, pos = 0.0, 0
    for ex, want in zip(examples, wants):
        got, pos = outs[pos:pos + len(want)], pos + len(want)
        dtypes = case.expected_dtypes(ex, want)
        scale = case.scale(ex) if case.scale is not None else 1.0
        for k, (g, w, dt) in enumerate(zip(got, want, dtypes)):
            c: Comparison = compare(g, w, dt, case.tolerance, scale)
            max_error = max(max_error, c.max_abs_error)
            if not c.ok and (worst is None or c.worst_ratio > worst[0]):
                where = ex.describe() + (f" output {k}" if len(want) > 1 else "")
                worst = (c.worst_ratio, c.max_abs_error, where, c.detail)
    if worst is not None:
        return Result(case.op, target, FAIL, max_error, len(examples), worst[2], worst[3])
    return Result(case.op, target, PASS, max_error, len(examples))


def _one_by_one(case: OpCase, target: str, examples, wants, start: float) -> Result:
    passed, outcomes = [], []
    for ex, want in zip(examples, wants):
        try:
            graph, feeds = _build_graph(case.op, [ex], [want])
            outs = _compile(graph, target).run(**feeds)
        except Exception as exc:  # noqa: BLE001 - every failure is reported, with its example
            outcomes.append(_error_result(case, target, ex, exc))
            continue
        r = _judge(case, target, [ex], [want], outs)
        (passed if r.status == PASS else outcomes).append(r)
    failed = [r for r in outcomes if r.status == FAIL]
    chosen = failed[0] if failed else outcomes[0] if outcomes else None
    errors = [r.max_error for r in passed + failed if r.max_error is not None]
    if chosen is None:  # all passed alone although the batch did not: the batch itself is the fault
        chosen = Result(case.op, target, FAIL, None, 0, "all examples in one graph",
                        "the examples pass one at a time but not compiled together")
    status = FAIL if failed or chosen.status == FAIL else UNSUPPORTED
    message = chosen.message
    if status == UNSUPPORTED:
        message += f" ({len(outcomes)} of {len(examples)} examples unsupported, {len(passed)} pass)"
    return Result(case.op, target, status, max(errors) if errors else None, len(examples), chosen.failing,
                  message, time.perf_counter() - start)


def no_case(op: str, target: str) -> Result:
    return Result(op, target, NO_CASE, message="the conformance suite has no case for this operator")
