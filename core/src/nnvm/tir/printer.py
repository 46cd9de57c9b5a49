"""Readable text for expressions and loop programs (what ``nnvm.lower`` prints)."""

from __future__ import annotations

from nnvm.tir import expr as E
from nnvm.tir import stmt as S

_INFIX = {
    "add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "floormod": "%",
    "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "and": "&&", "or": "||",
}


def expr_str(e) -> str:
    if isinstance(e, E.Var):
        return e.name
    if isinstance(e, E.Const):
        if e.dtype == "bool":
            return "True" if e.value else "False"
        if E.is_float(e.dtype):
            text = repr(e.value)
            return text + "f" if e.dtype == "float32" else f"{e.dtype}({text})"
        return str(e.value) if e.dtype in ("int64", "int32") else f"{e.dtype}({e.value})"
    if isinstance(e, E.BinOp):
        if e.op in _INFIX:
            return f"({expr_str(e.a)} {_INFIX[e.op]} {expr_str(e.b)})"
        return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
    if isinstance(e, E.Call):
        return f"{e.name}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, E.Cast):
        return f"{e.dtype}({expr_str(e.value)})"
    if isinstance(e, E.Select):
        return f"select({expr_str(e.cond)}, {expr_str(e.true_value)}, {expr_str(e.false_value)})"
    if isinstance(e, E.Ramp):
        return f"ramp({expr_str(e.base)}, {expr_str(e.stride)}, {e.lanes})"
    if isinstance(e, E.Broadcast):
        return f"x{e.lanes}({expr_str(e.value)})"
    if isinstance(e, E.Let):
        return f"(let {e.var.name} = {expr_str(e.value)} in {expr_str(e.body)})"
    if isinstance(e, E.TensorLoad):
        return f"{e.tensor.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, E.Load):
        return f"{e.buffer.name}[{expr_str(e.index)}]"
    if isinstance(e, E.TensorIntrinCall):
        parts = [f"&{expr_str(r)} strides ({', '.join(expr_str(x) for x in st)})"
                 for r, st in zip(e.regions, e.strides)]
        return f"{e.intrin.name}({', '.join(parts)})"
    if isinstance(e, E.Reduce):
        axes = ", ".join(iv.var.name for iv in e.axis)
        where = f", where={expr_str(e.condition)}" if e.condition is not None else ""
        return f"{e.combiner.name}({expr_str(e.source)}, axis=[{axes}]{where})"
    return f"<{type(e).__name__}>"


def stmt_str(s, indent: int = 0) -> str:
    lines: list[str] = []
    _stmt_lines(s, indent, lines)
    return "\n".join(lines)


def _stmt_lines(s, ind: int, out: list[str]) -> None:
    pad = "  " * ind
    if isinstance(s, S.For):
        kind = "" if s.kind == S.ForKind.SERIAL else f"  # {s.kind}"
        if s.thread_tag:
            kind = f"  # {s.thread_tag}"
        lo = expr_str(s.min)
        rng = f"range({expr_str(s.extent)})" if lo == "0" else f"range({lo}, {lo} + {expr_str(s.extent)})"
        out.append(f"{pad}for {s.var.name} in {rng}:{kind}")
        _stmt_lines(s.body, ind + 1, out)
    elif isinstance(s, S.Store):
        pred = f" if {expr_str(s.predicate)}" if s.predicate is not None else ""
        out.append(f"{pad}{s.buffer.name}[{expr_str(s.index)}] = {expr_str(s.value)}{pred}")
    elif isinstance(s, S.Allocate):
        shape = "*".join(expr_str(x) for x in s.buffer.shape) or "1"
        out.append(f"{pad}{s.buffer.name} = allocate({s.buffer.dtype}[{shape}], {s.buffer.scope})")
        _stmt_lines(s.body, ind, out)
    elif isinstance(s, S.Seq):
        for x in s.stmts:
            _stmt_lines(x, ind, out)
    elif isinstance(s, S.IfThenElse):
        out.append(f"{pad}if {expr_str(s.cond)}:")
        _stmt_lines(s.then_body, ind + 1, out)
        if s.else_body is not None:
            out.append(f"{pad}else:")
            _stmt_lines(s.else_body, ind + 1, out)
    elif isinstance(s, S.Evaluate):
        out.append(f"{pad}{expr_str(s.value)}")
    elif isinstance(s, S.LetStmt):
        out.append(f"{pad}{s.var.name} = {expr_str(s.value)}")
        _stmt_lines(s.body, ind, out)
    elif isinstance(s, S.AttrStmt):
        out.append(f"{pad}# attr {s.key} = {s.value}")
        _stmt_lines(s.body, ind, out)
    else:
        out.append(f"{pad}<{type(s).__name__}>")


def func_str(f) -> str:
    params = ", ".join(f"{b.name}: {b.dtype}[{', '.join(expr_str(x) for x in b.shape)}]" for b in f.params)
    return f"def {f.name}({params}):\n" + stmt_str(f.body, 1)
