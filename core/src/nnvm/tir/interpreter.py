"""A reference interpreter for loop programs: runs a ``PrimFunc`` directly on numpy arrays.

It is slow and meant to be obviously correct: every loop runs serially (parallel, vectorized and
thread-bound loops too), every value is a numpy scalar (or a numpy vector of ``lanes`` elements) of its
node's dtype, so float32 arithmetic rounds as compiled float32 code does. It is also a safety check of
lowering: every buffer access is bounds-checked, and a load or store whose dtype disagrees with its
buffer is an error naming the buffer.

The program is first compiled into nested Python closures (one per node), so the tree is walked once,
not once per loop iteration.

One exception to "serial": a ``threadIdx`` loop whose body contains a ``barrier`` runs its iterations
as coroutines in lockstep, each up to its next barrier, so cooperative loads into shared memory see
every thread's writes as on a GPU; each such thread gets private copies of ``local`` buffers, and a
barrier that only some threads reach is an error (it would hang a GPU).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from nnvm.errors import Error
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.visit import walk

# Key of the lane mask in the environment: inside a vector ``if_then_else`` only the lanes whose
# condition holds may touch memory, exactly as a masked load of compiled code.
_MASK = "__lane_mask__"

# Intrinsics that only order or annotate execution; serial execution makes them no-ops.
_EFFECT_INTRINSICS = ("barrier", "noop", "prefetch")

_UNSET = object()


def run_primfunc(func: S.PrimFunc, arrays: list) -> None:
    """Execute ``func`` with ``arrays`` (one numpy array per parameter buffer), writing into them.

    Arrays must be C-contiguous with the parameter's dtype and number of elements (buffers are flat,
    row-major), since results are written through flat views of them.
    """
    if len(arrays) != len(func.params):
        raise Error(f"{func.name} takes {len(func.params)} arrays "
                    f"({', '.join(b.name for b in func.params)}), got {len(arrays)}")
    env: dict = {_MASK: None}
    for arr, buf in zip(arrays, func.params):
        if not isinstance(arr, np.ndarray):
            raise Error(f"{func.name}: argument {buf.name} must be a numpy array, got {type(arr).__name__}")
        size = _buffer_size(buf, env)
        if arr.dtype != np.dtype(_np_dtype(buf.dtype)) or arr.size != size:
            raise Error(f"{func.name}: argument {buf.name} must hold {size} elements of {buf.dtype}, "
                        f"got {arr.dtype}{list(arr.shape)}")
        if not arr.flags.c_contiguous:
            raise Error(f"{func.name}: argument {buf.name} must be C-contiguous (results are written "
                        "through a flat view)")
        env[buf] = arr.reshape(-1)
    body = _StmtCompiler().stmt(func.body)
    with np.errstate(all="ignore"):
        body(env)


# ---------------------------------------------------------------------------------------------------
# values


def _np_dtype(dtype: str) -> str:
    base = E.split_lanes(dtype)[0]
    return "bool" if base == "bool" else base


def _converter(dtype: str) -> Callable:
    """Value -> numpy scalar (1 lane) or vector (n lanes) of ``dtype``."""
    base, lanes = E.split_lanes(dtype)
    nd = np.dtype(_np_dtype(base))
    if lanes == 1:
        scalar = nd.type

        def conv(v):
            if isinstance(v, np.ndarray) and v.ndim:
                raise Error(f"a vector value reached a scalar {dtype} expression")
            return v if type(v) is scalar else np.asarray(v).astype(nd)[()]

        return conv

    def conv_vec(v):
        arr = np.asarray(v).astype(nd)
        return np.broadcast_to(arr, (lanes,)).copy() if arr.shape != (lanes,) else arr

    return conv_vec


def _buffer_size(buf: S.Buffer, env: dict) -> int:
    size = 1
    for d in buf.shape:
        d = E.convert(d)
        if isinstance(d, E.Const):
            size *= int(d.value)
        else:
            size *= int(_ExprCompiler().expr(d)(env))
    return size


def _is_vec(v) -> bool:
    return isinstance(v, np.ndarray) and v.ndim > 0


def _trunc_div(a, b):
    q = np.floor_divide(a, b)
    # floor -> truncation: add one where the division was inexact and the signs differ
    fix = (a - q * b != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(q.dtype) if _is_vec(q) else (q + 1 if fix else q)


def _zero_divisor_gives_zero(fn):
    """Integer division by zero gives 0, as numpy and the compiled kernels do, rather than trapping."""

    def op(a, b):
        zero = np.asarray(b) == 0
        if not np.any(zero):
            return fn(a, b)
        r = fn(a, np.where(zero, 1, b).astype(np.asarray(b).dtype))
        return np.where(zero, 0, r).astype(np.asarray(r).dtype)

    return op


def _int_pow(a, b):
    # a negative exponent gives trunc(a ** b) (C's pow then a cast): 0 unless |a| == 1
    if np.all(np.asarray(b) >= 0):
        return np.power(a, b)
    neg = np.trunc(np.power(np.where(a == 0, 1, a).astype(np.float64), np.minimum(b, 0)))
    return np.where(b >= 0, np.power(a, np.maximum(b, 0)), np.where(a == 0, 0, neg))


def _float_floormod(a, b):
    return a - np.floor(a / b) * b


_INT_OPS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": _zero_divisor_gives_zero(_trunc_div),
    "floordiv": _zero_divisor_gives_zero(np.floor_divide), "floormod": _zero_divisor_gives_zero(np.mod),
    "min": np.minimum, "max": np.maximum, "pow": _int_pow, "fmod": _zero_divisor_gives_zero(np.fmod),
}
_FLOAT_OPS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "floordiv": lambda a, b: np.floor(a / b), "floormod": _float_floormod,
    "min": np.minimum, "max": np.maximum, "pow": np.power, "fmod": np.fmod,
}
_COMPARE_OPS = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal,
}


def _erf(x):
    if _is_vec(x):
        return np.array([math.erf(float(v)) for v in x]).astype(x.dtype)
    return type(x)(math.erf(float(x)))


def _same_dtype(fn):
    """Intrinsics computed in float64 or with Python scalars come back in the argument's dtype."""

    def op(x):
        r = fn(x)
        return r.astype(x.dtype) if _is_vec(r) else x.dtype.type(r)

    return op


_INTRINSICS = {
    "exp": np.exp, "exp_bounded": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "abs": np.abs,
    "floor": np.floor, "ceil": np.ceil, "round": np.rint, "sin": np.sin, "cos": np.cos, "trunc": np.trunc,
    "log2": np.log2, "exp2": np.exp2, "sign": np.sign, "erf": _erf, "not": np.logical_not,
    "isnan": np.isnan,
    "rsqrt": _same_dtype(lambda x: x.dtype.type(1) / np.sqrt(x)),
    "sigmoid": _same_dtype(lambda x: x.dtype.type(1) / (x.dtype.type(1) + np.exp(-x))),
}


# ---------------------------------------------------------------------------------------------------
# expressions


def _where_vars(env: dict) -> str:
    """``i=3, j=5`` for the loop variables in scope: where an error happened."""
    parts = [f"{k.name}={int(v) if not _is_vec(v) else list(v)}" for k, v in env.items()
             if isinstance(k, E.Var)]
    return f" (with {', '.join(parts)})" if parts else ""


def _check_index(buf: S.Buffer, arr: np.ndarray, idx, mask, what: str, env: dict):
    """The index as something numpy can use, after checking the lanes that are live."""
    n = arr.shape[0]
    if _is_vec(idx):
        live = idx if mask is None else idx[np.broadcast_to(mask, idx.shape)]
        if live.size and (live.min() < 0 or live.max() >= n):
            bad = live[(live < 0) | (live >= n)][0]
            raise Error(f"out-of-bounds {what} buffer {buf.name} (size {n}) at index {int(bad)} "
                        f"of vector index {list(map(int, idx))}{_where_vars(env)}")
        return idx if mask is None else np.where(np.broadcast_to(mask, idx.shape), idx, 0)
    i = int(idx)
    if (mask is None or np.any(mask)) and not 0 <= i < n:
        raise Error(f"out-of-bounds {what} buffer {buf.name} (size {n}) at index {i}{_where_vars(env)}")
    return i


class _ExprCompiler:
    """Turns an expression into a closure ``f(env) -> value``."""

    def expr(self, e) -> Callable:
        method = getattr(self, "_" + type(e).__name__, None)
        if method is None:
            raise Error(f"the interpreter cannot run expression node {type(e).__name__}: {e!r}")
        return method(e)

    def _Const(self, e: E.Const):
        value = _converter(e.dtype)(e.value)
        return lambda env: value

    def _Var(self, e: E.Var):
        def var(env):
            try:
                return env[e]
            except KeyError:
                raise Error(f"variable {e.name} is used outside the loop or let that defines it") from None

        return var

    def _BinOp(self, e: E.BinOp):
        a, b = self.expr(e.a), self.expr(e.b)
        conv = _converter(e.dtype)
        if e.op in ("and", "or"):
            is_and = e.op == "and"

            def logic(env):
                x = a(env)
                if not _is_vec(x) and bool(x) != is_and:
                    return conv(x)  # C's short circuit: the right side may be a guarded read
                y = b(env)
                return conv(np.logical_and(x, y) if is_and else np.logical_or(x, y))

            return logic
        if e.op in _COMPARE_OPS:
            fn = _COMPARE_OPS[e.op]
        elif e.op in _FLOAT_OPS:
            table = _FLOAT_OPS if E.is_float(e.a.dtype) else _INT_OPS
            fn = table[e.op]
        else:
            raise Error(f"the interpreter does not know the binary operation {e.op!r}")
        where = f"{e.op} in {e!r}"

        def binop(env):
            try:
                return conv(fn(a(env), b(env)))
            except Error as exc:
                raise Error(f"{exc}: {where}{_where_vars(env)}") from None

        return binop

    def _Call(self, e: E.Call):
        args = [self.expr(x) for x in e.args]
        conv = _converter(e.dtype)
        if e.name == "if_then_else":
            return self._if_then_else(args, conv)
        if e.name in _EFFECT_INTRINSICS:
            return lambda env: None
        fn = _INTRINSICS.get(e.name)
        if fn is None:
            raise Error(f"the interpreter does not know the intrinsic {e.name!r} (in {e!r})")
        if len(args) != 1:
            raise Error(f"intrinsic {e.name} takes one argument, got {len(args)}")
        (x,) = args
        return lambda env: conv(fn(x(env)))

    @staticmethod
    def _if_then_else(args, conv):
        cond, t, f = args

        def ite(env):
            c = cond(env)
            if not _is_vec(c):
                return conv(t(env) if c else f(env))
            outer = env[_MASK]
            try:
                env[_MASK] = c if outer is None else (c & outer)
                tv = t(env)
                env[_MASK] = ~c if outer is None else (~c & outer)
                fv = f(env)
            finally:
                env[_MASK] = outer
            return conv(np.where(c, tv, fv))

        return ite

    def _Cast(self, e: E.Cast):
        value, conv = self.expr(e.value), _converter(e.dtype)
        return lambda env: conv(value(env))

    def _Select(self, e: E.Select):
        cond, t, f = self.expr(e.cond), self.expr(e.true_value), self.expr(e.false_value)
        conv = _converter(e.dtype)

        def select(env):
            c, tv, fv = cond(env), t(env), f(env)
            return conv(np.where(c, tv, fv)) if _is_vec(c) else conv(tv if c else fv)

        return select

    def _Ramp(self, e: E.Ramp):
        base, stride, conv = self.expr(e.base), self.expr(e.stride), _converter(e.dtype)
        lanes = np.arange(e.lanes)
        return lambda env: conv(base(env) + stride(env) * lanes)

    def _Broadcast(self, e: E.Broadcast):
        value, conv = self.expr(e.value), _converter(e.dtype)
        return lambda env: conv(value(env))

    def _Let(self, e: E.Let):
        value, body, var = self.expr(e.value), self.expr(e.body), e.var

        def let(env):
            with _scoped(env, var, value(env)):
                return body(env)

        return let

    def _Load(self, e: E.Load):
        buf = e.buffer
        _check_dtype(buf, e.dtype, "load from")
        index = self.expr(e.index)
        conv = _converter(e.dtype)

        def load(env):
            arr = env.get(buf)
            if arr is None:
                raise Error(f"load from buffer {buf.name} outside its allocation{_where_vars(env)}")
            idx = _check_index(buf, arr, index(env), env[_MASK], "load from", env)
            return conv(arr[idx])

        return load

    def _TensorIntrinCall(self, e: E.TensorIntrinCall):
        """Run the intrinsic's numpy reference on strided views of the regions, after checking that
        every element of every region lies inside its buffer."""
        intrin = e.intrin
        regions = []
        for load, strides, tensor in zip(e.regions, e.strides, intrin.buffers):
            steps = [int(s.value) if isinstance(s, E.Const) else None for s in strides]
            if None in steps:
                raise Error(f"tensor intrinsic {intrin.name}: strides of {load.buffer.name} are not "
                            "constants")
            regions.append((load.buffer, self.expr(load.index), steps, intrin.shape(tensor)))

        def call(env):
            views = []
            for buf, index, steps, shape in regions:
                arr = env.get(buf)
                if arr is None:
                    raise Error(f"{intrin.name}: buffer {buf.name} used outside its allocation"
                                f"{_where_vars(env)}")
                base = int(index(env))
                lo = base + sum(min(0, (n - 1) * s) for n, s in zip(shape, steps))
                hi = base + sum(max(0, (n - 1) * s) for n, s in zip(shape, steps))
                if lo < 0 or hi >= arr.shape[0]:
                    raise Error(f"out-of-bounds tensor intrinsic {intrin.name}: region of buffer {buf.name} "
                                f"(size {arr.shape[0]}) spans indices {lo}..{hi}{_where_vars(env)}")
                views.append(np.lib.stride_tricks.as_strided(
                    arr[base:], shape, [s * arr.itemsize for s in steps], writeable=True))
            intrin.reference(*views)
            return np.int32(0)

        return call

    def _TensorLoad(self, e):
        raise Error(f"tensor read {e!r} was not lowered to a buffer load; run lowering first")

    def _Reduce(self, e):
        raise Error(f"reduction {e!r} was not lowered; run lowering first")


def _check_dtype(buf: S.Buffer, dtype: str, what: str) -> None:
    if E.split_lanes(dtype)[0] != E.split_lanes(buf.dtype)[0]:
        raise Error(f"{what} buffer {buf.name}: a {dtype} access to a {buf.dtype} buffer")


# ---------------------------------------------------------------------------------------------------
# statements


class _scoped:
    """``with _scoped(env, key, value):`` binds ``env[key]`` for the block (a loop, given no ``value``,
    binds it per iteration) and then restores what it was, or its absence: a loop variable, a let or an
    allocation shadows an outer one only inside its body. Shared by the plain and the lockstep
    statements, which differ only in how a body runs."""

    __slots__ = ("env", "key", "saved")

    def __init__(self, env: dict, key, value=_UNSET):
        self.env, self.key = env, key
        self.saved = env.get(key, _UNSET)
        if value is not _UNSET:
            env[key] = value

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.saved is _UNSET:
            self.env.pop(self.key, None)
        else:
            self.env[self.key] = self.saved


def _condition(s: S.IfThenElse, cond: Callable, env: dict) -> bool:
    c = cond(env)
    if _is_vec(c):
        raise Error(f"an if statement needs a scalar condition, got the vector {s.cond!r}")
    return bool(c)


class _StmtCompiler(_ExprCompiler):
    """Turns a statement into a closure ``f(env) -> None``."""

    def stmt(self, s) -> Callable:
        method = getattr(self, "_" + type(s).__name__, None)
        if method is None:
            raise Error(f"the interpreter cannot run statement node {type(s).__name__}")
        return method(s)

    def _For(self, s: S.For):
        if _is_thread_loop(s) and _has_barrier(s.body):
            threads = _Lockstep(self)._For(s)

            def run_threads(env):
                for _ in threads(env):
                    pass

            return run_threads
        mn, ext, body, var = self.expr(s.min), self.expr(s.extent), self.stmt(s.body), s.var
        make = np.dtype(_np_dtype(var.dtype)).type

        def loop(env):
            lo = int(mn(env))
            with _scoped(env, var):
                for k in range(lo, lo + int(ext(env))):
                    env[var] = make(k)
                    body(env)

        return loop

    def _Store(self, s: S.Store):
        buf = s.buffer
        _check_dtype(buf, s.value.dtype, "store to")
        index, value = self.expr(s.index), self.expr(s.value)
        pred = self.expr(s.predicate) if s.predicate is not None else None
        conv = _converter(buf.dtype)

        def store(env):
            arr = env.get(buf)
            if arr is None:
                raise Error(f"store to buffer {buf.name} outside its allocation{_where_vars(env)}")
            mask = env[_MASK]
            if pred is not None:
                p = pred(env)
                mask = p if mask is None else (p & mask)
            idx = index(env)
            v = value(env)
            if _is_vec(v) and not _is_vec(idx):
                raise Error(f"store to buffer {buf.name}: a vector value at the scalar index {int(idx)}")
            idx = _check_index(buf, arr, idx, mask, "store to", env)
            if mask is None:
                arr[idx] = v
            elif _is_vec(idx):
                m = np.broadcast_to(mask, idx.shape)
                arr[idx[m]] = np.broadcast_to(v, idx.shape)[m]
            elif np.all(mask):
                arr[idx] = conv(v)

        return store

    def _Allocate(self, s: S.Allocate):
        buf, body = s.buffer, self.stmt(s.body)
        dtype = _np_dtype(buf.dtype)

        def allocate(env):
            with _scoped(env, buf, np.zeros(_buffer_size(buf, env), dtype=dtype)):
                body(env)

        return allocate

    def _Seq(self, s: S.Seq):
        parts = [self.stmt(x) for x in s.stmts]

        def seq(env):
            for p in parts:
                p(env)

        return seq

    def _IfThenElse(self, s: S.IfThenElse):
        cond, then = self.expr(s.cond), self.stmt(s.then_body)
        other = self.stmt(s.else_body) if s.else_body is not None else None

        def branch(env):
            if _condition(s, cond, env):
                then(env)
            elif other is not None:
                other(env)

        return branch

    def _LetStmt(self, s: S.LetStmt):
        value, body, var = self.expr(s.value), self.stmt(s.body), s.var

        def let(env):
            with _scoped(env, var, value(env)):
                body(env)

        return let

    def _AttrStmt(self, s: S.AttrStmt):
        return self.stmt(s.body)

    def _Evaluate(self, s: S.Evaluate):
        value = self.expr(s.value)

        def evaluate(env):
            value(env)

        return evaluate


# ---------------------------------------------------------------------------------------------------
# threads that synchronize


def _is_thread_loop(s: S.For) -> bool:
    return s.kind == S.ForKind.THREAD_BINDING and s.thread_tag.startswith("threadIdx")


def _has_barrier(node) -> bool:
    found = []
    walk(node, lambda n: found.append(n) if isinstance(n, E.Call) and n.name == "barrier" else None)
    return bool(found)


def _step(gen) -> bool:
    """Run a thread to its next barrier: True if it stopped there, False if it finished."""
    try:
        next(gen)
        return True
    except StopIteration:
        return False


class _Lockstep:
    """Statements as generator functions ``f(env)`` that yield at every barrier they pass.

    Only statements containing a barrier become generators; the rest run as ordinary closures.
    """

    def __init__(self, plain: _StmtCompiler):
        self.plain = plain

    def gen(self, s) -> Callable:
        if not _has_barrier(s):
            run = self.plain.stmt(s)

            def plain(env):
                run(env)
                yield from ()

            return plain
        method = getattr(self, "_" + type(s).__name__, None)
        if method is None:
            raise Error(f"the interpreter cannot synchronize threads across a {type(s).__name__}")
        return method(s)

    def _Evaluate(self, s: S.Evaluate):
        value = self.plain.expr(s.value)

        def barrier(env):
            value(env)
            yield

        return barrier

    def _Seq(self, s: S.Seq):
        parts = [self.gen(x) for x in s.stmts]

        def seq(env):
            for p in parts:
                yield from p(env)

        return seq

    def _For(self, s: S.For):
        mn, ext, body, var = self.plain.expr(s.min), self.plain.expr(s.extent), self.gen(s.body), s.var
        make = np.dtype(_np_dtype(var.dtype)).type
        if not _is_thread_loop(s):
            def loop(env):
                lo = int(mn(env))
                with _scoped(env, var):
                    for k in range(lo, lo + int(ext(env))):
                        env[var] = make(k)
                        yield from body(env)

            return loop

        def threads(env):
            lo = int(mn(env))
            gens = []
            for k in range(lo, lo + int(ext(env))):
                # each thread: its own loop variables and its own copies of local buffers
                tenv = {key: (v.copy() if isinstance(key, S.Buffer) and key.scope == "local" else v)
                        for key, v in env.items()}
                tenv[var] = make(k)
                gens.append(body(tenv))
            while True:
                waiting = [g for g in gens if _step(g)]
                if not waiting:
                    return
                if len(waiting) != len(gens):
                    raise Error(f"only {len(waiting)} of {len(gens)} threads of {s.thread_tag} ({var.name}) "
                                f"reached a barrier, the others finished: a barrier in divergent code"
                                f"{_where_vars(env)}")
                yield  # every thread of this loop waits at a barrier: the enclosing threads may go on

        return threads

    def _IfThenElse(self, s: S.IfThenElse):
        cond, then = self.plain.expr(s.cond), self.gen(s.then_body)
        other = self.gen(s.else_body) if s.else_body is not None else None

        def branch(env):
            if _condition(s, cond, env):
                yield from then(env)
            elif other is not None:
                yield from other(env)

        return branch

    def _LetStmt(self, s: S.LetStmt):
        value, body, var = self.plain.expr(s.value), self.gen(s.body), s.var

        def let(env):
            with _scoped(env, var, value(env)):
                yield from body(env)

        return let

    def _AttrStmt(self, s: S.AttrStmt):
        return self.gen(s.body)

    def _Allocate(self, s: S.Allocate):
        buf, body = s.buffer, self.gen(s.body)

        def allocate(env):
            with _scoped(env, buf, np.zeros(_buffer_size(buf, env), dtype=_np_dtype(buf.dtype))):
                yield from body(env)

        return allocate
