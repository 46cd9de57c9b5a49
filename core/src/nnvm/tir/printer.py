"""Readable text for expressions and loop programs (what ``nnvm.lower`` prints).

The nodes' ``__repr__`` calls this module, so it reads nodes by their class name and attributes and
imports neither ``expr`` nor ``stmt``: the node modules stay below it, with no import cycle.
"""

from __future__ import annotations

_KINDS = frozenset("""
Var Const BinOp Call Cast Select Ramp Broadcast Let TensorLoad Load TensorIntrinCall Reduce
For Store Allocate Seq IfThenElse Evaluate LetStmt AttrStmt
""".split())


def _kind(node) -> str:
    """The name of the node's class, or of its nearest base class this printer knows."""
    return next((c.__name__ for c in type(node).__mro__ if c.__name__ in _KINDS), "")


def _is_float(dtype: str) -> bool:
    return dtype.partition("x")[0] in ("float16", "bfloat16", "float32", "float64")

_INFIX = {
    "add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "floormod": "%",
    "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "and": "&&", "or": "||",
}


def expr_str(e) -> str:
    kind = _kind(e)
    if kind == "Var":
        return e.name
    if kind == "Const":
        if e.dtype == "bool":
            return "True" if e.value else "False"
        if _is_float(e.dtype):
            text = repr(e.value)
            return text + "f" if e.dtype == "float32" else f"{e.dtype}({text})"
        return str(e.value) if e.dtype in ("int64", "int32") else f"{e.dtype}({e.value})"
    if kind == "BinOp":
        if e.op in _INFIX:
            return f"({expr_str(e.a)} {_INFIX[e.op]} {expr_str(e.b)})"
        return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
    if kind == "Call":
        return f"{e.name}({', '.join(expr_str(a) for a in e.args)})"
    if kind == "Cast":
        return f"{e.dtype}({expr_str(e.value)})"
    if kind == "Select":
        return f"select({expr_str(e.cond)}, {expr_str(e.true_value)}, {expr_str(e.false_value)})"
    if kind == "Ramp":
        return f"ramp({expr_str(e.base)}, {expr_str(e.stride)}, {e.lanes})"
    if kind == "Broadcast":
        return f"x{e.lanes}({expr_str(e.value)})"
    if kind == "Let":
        return f"(let {e.var.name} = {expr_str(e.value)} in {expr_str(e.body)})"
    if kind == "TensorLoad":
        return f"{e.tensor.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if kind == "Load":
        return f"{e.buffer.name}[{expr_str(e.index)}]"
    if kind == "TensorIntrinCall":
        parts = [f"&{expr_str(r)} strides ({', '.join(expr_str(x) for x in st)})"
                 for r, st in zip(e.regions, e.strides)]
        return f"{e.intrin.name}({', '.join(parts)})"
    if kind == "Reduce":
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
    kind = _kind(s)
    if kind == "For":
        note = "" if s.kind == "serial" else f"  # {s.kind}"
        if s.thread_tag:
            note = f"  # {s.thread_tag}"
        lo = expr_str(s.min)
        rng = f"range({expr_str(s.extent)})" if lo == "0" else f"range({lo}, {lo} + {expr_str(s.extent)})"
        out.append(f"{pad}for {s.var.name} in {rng}:{note}")
        _stmt_lines(s.body, ind + 1, out)
    elif kind == "Store":
        pred = f" if {expr_str(s.predicate)}" if s.predicate is not None else ""
        out.append(f"{pad}{s.buffer.name}[{expr_str(s.index)}] = {expr_str(s.value)}{pred}")
    elif kind == "Allocate":
        shape = "*".join(expr_str(x) for x in s.buffer.shape) or "1"
        out.append(f"{pad}{s.buffer.name} = allocate({s.buffer.dtype}[{shape}], {s.buffer.scope})")
        _stmt_lines(s.body, ind, out)
    elif kind == "Seq":
        for x in s.stmts:
            _stmt_lines(x, ind, out)
    elif kind == "IfThenElse":
        out.append(f"{pad}if {expr_str(s.cond)}:")
        _stmt_lines(s.then_body, ind + 1, out)
        if s.else_body is not None:
            out.append(f"{pad}else:")
            _stmt_lines(s.else_body, ind + 1, out)
    elif kind == "Evaluate":
        out.append(f"{pad}{expr_str(s.value)}")
    elif kind == "LetStmt":
        out.append(f"{pad}{s.var.name} = {expr_str(s.value)}")
        _stmt_lines(s.body, ind, out)
    elif kind == "AttrStmt":
        out.append(f"{pad}# attr {s.key} = {s.value}")
        _stmt_lines(s.body, ind, out)
    else:
        out.append(f"{pad}<{type(s).__name__}>")


def func_str(f) -> str:
    params = ", ".join(f"{b.name}: {b.dtype}[{', '.join(expr_str(x) for x in b.shape)}]" for b in f.params)
    return f"def {f.name}({params}):\n" + stmt_str(f.body, 1)
