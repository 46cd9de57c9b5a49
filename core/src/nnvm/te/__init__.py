"""Tensor expressions: define *what* to compute (``compute``), then *how* (``create_schedule``).

In the style TVM users know::

    A = te.placeholder((n, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
"""

from nnvm.te.schedule import Schedule, Specialised, Stage, create_schedule  # noqa: F401
from nnvm.te.tensor import (  # noqa: F401
    ComputeOp,
    Operation,
    PlaceholderOp,
    Tensor,
    comm_reducer,
    compute,
    max,
    min,
    placeholder,
    prod,
    reduce_axis,
    sum,
)
from nnvm.te.tensorize import TensorIntrin, backend_intrinsic, decl_tensor_intrin  # noqa: F401
from nnvm.tir.expr import (  # noqa: F401
    Expr,
    IterVar,
    Range,
    Var,
    binop,
    cast,
    const,
    convert,
    max_value,
    min_value,
    split_lanes,
    with_lanes,
)
from nnvm.tir.expr import call as _call
from nnvm.tir.expr import if_then_else as _ite
from nnvm.tir.expr import select as _select


def var(name: str = "v", dtype: str = "int64") -> Var:
    return Var(name, dtype)


def if_then_else(cond, true_value, false_value):
    """``true_value`` where ``cond`` holds, else ``false_value``; only the chosen side is evaluated,
    so it may guard reads that would be out of bounds (padding)."""
    return _ite(cond, true_value, false_value)


def select(cond, true_value, false_value):
    """Like ``if_then_else`` but both sides may be evaluated: cheaper (no branch), only for safe sides."""
    return _select(cond, true_value, false_value)


def _unary(name):
    def f(x):
        return _call(name, x)

    f.__name__ = name
    f.__doc__ = f"Elementwise {name}."
    return f


exp = _unary("exp")
log = _unary("log")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
erf = _unary("erf")
floor = _unary("floor")
ceil = _unary("ceil")
round = _unary("round")  # noqa: A001
trunc = _unary("trunc")
sin = _unary("sin")
cos = _unary("cos")
exp_bounded = _unary("exp_bounded")
exp_bounded.__doc__ = ("Elementwise exp of an argument known to lie in ``tir.expr.EXP_BOUNDED_RANGE`` "
                       "(or NaN): a CPU's short form, exp elsewhere.")


def isnan(x):
    """Elementwise NaN test (bool result)."""
    x = convert(x)
    return _call("isnan", x, dtype=with_lanes("bool", split_lanes(x.dtype)[1]))


def abs(x):  # noqa: A001
    return _call("abs", x)


def power(a, b):
    return binop("pow", a, b)


def fmod(a, b):
    return binop("fmod", a, b)


def maximum(a, b):
    return binop("max", a, b)


def minimum(a, b):
    return binop("min", a, b)


def floordiv(a, b):
    return binop("floordiv", a, b)


def floormod(a, b):
    return binop("floormod", a, b)


def all_of(*conds):
    """Logical and of conditions (True for none)."""
    out = const(True)
    for c in conds:
        out = out & c
    return out
