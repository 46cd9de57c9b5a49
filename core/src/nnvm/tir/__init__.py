"""The loop program (TIR): expressions, statements, simplifier, lowering from schedules."""

from nnvm.tir.expr import (  # noqa: F401
    BinOp, Broadcast, Call, Cast, CommReducer, Const, Expr, IterKind, IterVar, Let, Load, Ramp, Range,
    Reduce, Select, TensorLoad, Var, binop, call, cast, const, convert, select,
)
from nnvm.tir.stmt import (  # noqa: F401
    Allocate, AttrStmt, Buffer, Evaluate, For, ForKind, IfThenElse, LetStmt, PrimFunc, Seq, Stmt, Store, seq,
)
