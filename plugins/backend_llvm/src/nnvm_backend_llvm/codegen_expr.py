"""Expressions of the loop program as LLVM IR values: types, arithmetic, casts, memory, math.

A mixin of ``CodeGenLLVM`` (see ``codegen.py``): it needs ``self.module``, ``self.builder`` and the
current frame's variable and buffer bindings. Registers hold ``bool`` as ``i1``; memory holds it as
``i8``. Vector dtypes (``float32x8``) are LLVM vectors; a scalar meeting a vector is broadcast.
"""

from __future__ import annotations

import math

from llvmlite import ir

from nnvm.errors import Error
from nnvm.tir import expr as E
from nnvm.tir.visit import pure_key
from nnvm_backend_llvm.codegen_math import FastMath

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
# scalar integer dtypes of index arithmetic: what ``index_value`` emits once per block
INDEX_DTYPES = frozenset({"int64", "int32"})
FLOAT_TYPES = {"float16": ir.HalfType(), "float32": ir.FloatType(), "float64": ir.DoubleType()}
FAST = ("contract",)  # lets LLVM fuse a*b+c into FMA, nothing that changes results otherwise

# Intrinsics with an LLVM counterpart taking and returning the operand type.
LLVM_UNARY = {
    "exp": "exp", "exp_bounded": "exp", "log": "log", "sqrt": "sqrt", "floor": "floor", "ceil": "ceil",
    "round": "roundeven", "trunc": "trunc", "sin": "sin", "cos": "cos", "log2": "log2", "exp2": "exp2",
    "abs": "fabs",
}
# Intrinsics computed by the C math library (float, double), one lane at a time.
LIBM_UNARY = {"tanh": ("tanhf", "tanh"), "erf": ("erff", "erf")}


def rounding_converts(triple: str) -> bool:
    """Whether a vector ``llvm.lrint`` is one instruction on ``triple``'s architecture: x86's
    ``cvtps2dq``. AArch64 lowers it to ``frintx`` + ``fcvtzs``, no shorter than ``roundeven`` and a
    truncating convert; ARMv7 to one ``lrintf`` call a lane."""
    return triple.startswith(("x86_64", "i386", "i686"))


def scalar_type(base: str, in_memory: bool = False) -> ir.Type:
    if base in FLOAT_TYPES:
        return FLOAT_TYPES[base]
    if base == "bool":
        return I8 if in_memory else I1
    if E.is_int(base):
        return ir.IntType(E.bits(base))
    raise Error(f"the llvm backend does not support the dtype {base!r}")


def value_type(dtype: str) -> ir.Type:
    """The register type of ``dtype``."""
    base, lanes = E.split_lanes(dtype)
    t = scalar_type(base)
    return ir.VectorType(t, lanes) if lanes > 1 else t


def byte_size(dtype: str) -> int:
    base = E.split_lanes(dtype)[0]
    return 1 if base == "bool" else E.bits(base) // 8


def _lanes(dtype: str) -> int:
    return E.split_lanes(dtype)[1]


def _suffix(t: ir.Type) -> str:
    """Overload suffix of an intrinsic name: f32, v8f32, i64 ..."""
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{_suffix(t.element)}"
    if isinstance(t, ir.PointerType):
        return "p0"
    return t.intrinsic_name


class ExprEmitter(FastMath):
    """Expression emission; mixed into ``CodeGenLLVM``."""

    module: ir.Module
    builder: ir.IRBuilder

    # -- declarations -----------------------------------------------------------------------------
    def declare(self, name: str, ret: ir.Type, args: list, attrs=("nounwind",)) -> ir.Function:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
            for a in attrs:
                fn.attributes.add(a)
        return fn

    def intrinsic(self, name: str, ret: ir.Type, args: list, overload: list) -> ir.Function:
        full = f"llvm.{name}." + ".".join(_suffix(t) for t in overload)
        return self.declare(full, ret, args)

    def call_intrinsic(self, name: str, *values, ret=None):
        ty = values[0].type
        fn = self.intrinsic(name, ret or ty, [v.type for v in values], [ty])
        return self.builder.call(fn, list(values))

    # -- small helpers ----------------------------------------------------------------------------
    def splat(self, value, lanes: int):
        if isinstance(value.type, ir.VectorType):
            return value
        vty = ir.VectorType(value.type, lanes)
        if isinstance(value, ir.Constant):
            return ir.Constant(vty, [value] * lanes)
        first = self.builder.insert_element(ir.Constant(vty, ir.Undefined), value, ir.Constant(I32, 0))
        mask = ir.Constant(ir.VectorType(I32, lanes), [0] * lanes)
        return self.builder.shuffle_vector(first, ir.Constant(vty, ir.Undefined), mask)

    def const_of(self, ty: ir.Type, value):
        if isinstance(ty, ir.VectorType):
            return ir.Constant(ty, [self.const_of(ty.element, value)] * ty.count)
        if isinstance(ty, ir.IntType):
            value = int(value)
            if value >= 2 ** (ty.width - 1):
                value -= 2 ** ty.width  # unsigned constants as their two's complement bits
            return ir.Constant(ty, value)
        return ir.Constant(ty, float(value))

    def to_index(self, value, dtype: str):
        """An integer value widened (or narrowed) to i64, respecting its signedness."""
        target = I64 if not isinstance(value.type, ir.VectorType) else ir.VectorType(I64, value.type.count)
        width = value.type.element.width if isinstance(value.type, ir.VectorType) else value.type.width
        if width == 64:
            return value
        if width > 64:
            return self.builder.trunc(value, target)
        if E.is_uint(dtype) or E.split_lanes(dtype)[0] == "bool":
            return self.builder.zext(value, target)
        return self.builder.sext(value, target)

    def index(self, e: E.Expr):
        return self.to_index(self.expr(e), e.dtype)

    def lanewise(self, value, fn):
        """Apply ``fn`` (scalar -> scalar) to each lane of a vector."""
        if not isinstance(value.type, ir.VectorType):
            return fn(value)
        out = None
        for k in range(value.type.count):
            lane = fn(self.builder.extract_element(value, ir.Constant(I32, k)))
            if out is None:
                out = ir.Constant(ir.VectorType(lane.type, value.type.count), ir.Undefined)
            out = self.builder.insert_element(out, lane, ir.Constant(I32, k))
        return out

    # -- dispatch ---------------------------------------------------------------------------------
    def expr(self, e: E.Expr):
        if type(e) is E.BinOp and e.dtype in INDEX_DTYPES:
            return self.index_value(e)
        method = getattr(self, "expr_" + type(e).__name__, None)
        if method is None:
            raise Error(f"the llvm backend cannot compile the expression {e!r} ({type(e).__name__})")
        return method(e)

    # -- index arithmetic emitted once per block ----------------------------------------------------
    def index_value(self, e: E.BinOp):
        """``e`` emitted once per basic block: an unrolled tile repeats its address arithmetic
        (``(f // 28)*50176 + ...``) in every element's load and store, and the code generator's Python,
        LLVM's parser and its O3 paid for each copy until GVN merged them (DenseNet-121: a third of
        the IR text). Variables are keyed by the value they are bound to, so a ``let`` bound again in
        the same block (an unrolled copy's) is a new key."""
        key = self.index_key(e)
        if key is None:
            return self.expr_BinOp(e)
        memo = self._index_memo
        if memo is None or memo[0] is not self.builder.block or memo[1] is not self.frame:
            memo = self._index_memo = (self.builder.block, self.frame, {})
        value = memo[2].get(key)
        if value is None:
            value = memo[2][key] = self.expr_BinOp(e)
        return value

    _index_memo = None
    _index_keys = None

    def index_key(self, e):
        """A structural key of a pure scalar integer expression (each variable with the id of the value
        it is bound to now), else None. Remembered per node while the bindings stay the same."""
        keys = self._index_keys
        version = (self.frame, self.frame.vars.version)
        if keys is None or keys[0] != version:
            keys = self._index_keys = (version, {})
        return pure_key(e, self._bound_key, keys[1], INDEX_DTYPES)

    def _bound_key(self, v: E.Var):
        bound = self.frame.vars.get(v)
        return None if bound is None else (id(v), id(bound))

    def nonnegative(self, e: E.Expr) -> bool:
        """Whether ``e`` is >= 0 by construction (loop variables from a start >= 0, constants, and sums,
        products, quotients and remainders of those): its floor division is C's, one instruction."""
        t = type(e)
        if t is E.Const:
            return isinstance(e.value, int) and e.value >= 0
        if t is E.Var:
            return self.frame is not None and e in self.frame.nonneg
        if t is E.BinOp and e.op in ("add", "mul", "floordiv", "floormod", "min", "max"):
            return self.nonnegative(e.a) and self.nonnegative(e.b)
        return False

    def expr_Var(self, e: E.Var):
        try:
            return self.frame.vars[e]
        except KeyError:
            raise Error(f"kernel {self.frame.name}: the variable {e.name} is used but never defined"
                        ) from None

    def expr_Const(self, e: E.Const):
        ty = value_type(e.dtype)
        if E.is_float(e.dtype):
            return self.const_of(ty, e.value)
        return self.const_of(ty, int(e.value))

    def expr_Cast(self, e: E.Cast):
        rounded = self.rounding_convert(e)
        if rounded is not None:
            return rounded
        return self.cast(self.expr(e.value), e.value.dtype, e.dtype)

    def rounding_convert(self, e: E.Cast):
        """``int8(round(x) + c)`` (8 or 16 bits, ``c`` an integer: a requantize's or quantize's last step)
        as ``int8(lrint(x) + int(c))``: one rounding convert (x86 ``vcvtps2dq``) where ``roundeven`` and a
        truncating convert took two. The same values: ``lrint`` rounds half to even in the default
        floating-point environment LLVM assumes, and wherever the 8-bit cast is defined (its value in
        range) ``round(x) + c`` is a float holding a small integer exactly. None: not that form, or not a
        target where that is shorter (``rounding_converts``)."""
        base, lanes = E.split_lanes(e.dtype)
        if not E.is_int(base) or E.bits(base) > 16 or not rounding_converts(str(self.module.triple)):
            return None
        v, c = e.value, 0
        if isinstance(v, E.BinOp) and v.op == "add" and isinstance(v.b, E.Const) \
                and float(v.b.value).is_integer() and abs(v.b.value) < 2 ** 16:
            v, c = v.a, int(v.b.value)
        if not (isinstance(v, E.Call) and v.name == "round" and E.split_lanes(v.dtype)[0] == "float32"):
            return None
        x = self.expr(v.args[0])
        lanes = max(lanes, _lanes(v.dtype))
        if lanes > 1:
            x = self.splat(x, lanes)
        ity = value_type(E.with_lanes("int32", lanes))
        r = self.builder.call(self.intrinsic("lrint", ity, [x.type], [ity, x.type]), [x])
        if c:
            r = self.builder.add(r, self.const_of(ity, c))
        return self.cast(r, E.with_lanes("int32", lanes), e.dtype)

    def expr_Let(self, e: E.Let):
        self.frame.vars[e.var] = self.expr(e.value)
        try:
            return self.expr(e.body)
        finally:
            del self.frame.vars[e.var]

    def expr_Ramp(self, e: E.Ramp):
        base = self.expr(e.base)
        stride = self.expr(e.stride)
        ty = base.type
        steps = ir.Constant(ir.VectorType(ty, e.lanes), [ir.Constant(ty, k) for k in range(e.lanes)])
        flags = ("nsw",) if not E.is_uint(e.base.dtype) else ()
        scaled = self.builder.mul(self.splat(stride, e.lanes), steps, flags=flags)
        return self.builder.add(self.splat(base, e.lanes), scaled, flags=flags)

    def expr_Broadcast(self, e: E.Broadcast):
        return self.splat(self.expr(e.value), e.lanes)

    def expr_Select(self, e: E.Select):
        cond, t, f = self.expr(e.cond), self.expr(e.true_value), self.expr(e.false_value)
        lanes = _lanes(e.dtype)
        if lanes > 1:
            t, f = self.splat(t, lanes), self.splat(f, lanes)
        return self.builder.select(cond, t, f)

    # -- casts ------------------------------------------------------------------------------------
    def cast(self, value, src: str, dst: str):
        sb, db = E.split_lanes(src)[0], E.split_lanes(dst)[0]
        lanes = max(_lanes(src), _lanes(dst))
        if lanes > 1:
            value = self.splat(value, lanes)
        ty = value_type(E.with_lanes(db, lanes))
        b = self.builder
        if sb == db:
            return value
        if db == "bool":
            if E.is_float(sb):
                return b.fcmp_unordered("!=", value, self.const_of(value.type, 0.0))
            return b.icmp_unsigned("!=", value, self.const_of(value.type, 0))
        if sb == "bool":
            return b.uitofp(value, ty) if E.is_float(db) else b.zext(value, ty)
        if E.is_float(sb) and E.is_float(db):
            return b.fpext(value, ty) if E.bits(db) > E.bits(sb) else b.fptrunc(value, ty)
        if E.is_float(sb):
            return b.fptoui(value, ty) if E.is_uint(db) else b.fptosi(value, ty)
        if E.is_float(db):
            return b.uitofp(value, ty) if E.is_uint(sb) else b.sitofp(value, ty)
        if E.bits(db) == E.bits(sb):
            return value
        if E.bits(db) < E.bits(sb):
            return b.trunc(value, ty)
        return b.zext(value, ty) if E.is_uint(sb) else b.sext(value, ty)

    # -- arithmetic -------------------------------------------------------------------------------
    def expr_BinOp(self, e: E.BinOp):
        a, b = self.expr(e.a), self.expr(e.b)
        lanes = max(_lanes(e.a.dtype), _lanes(e.b.dtype))
        if lanes > 1:
            a, b = self.splat(a, lanes), self.splat(b, lanes)
        base = E.split_lanes(e.a.dtype)[0]
        if (e.op in ("floordiv", "floormod") and lanes == 1 and E.is_int(base) and not E.is_uint(base)
                and isinstance(e.b, E.Const) and e.b.value > 0 and e.b.value & (e.b.value - 1)
                and self.nonnegative(e.a)):
            # floor and C division agree on a dividend >= 0 and a divisor > 0 (powers of two: a shift, below)
            return self.builder.sdiv(a, b) if e.op == "floordiv" else self.builder.srem(a, b)
        return self.binop(e.op, a, b, base, e.b)

    def binop(self, op: str, a, b, base: str, b_expr=None):
        bld = self.builder
        if op in E.COMPARE_OPS:
            return self.compare(op, a, b, base)
        if op in ("and", "or"):
            return bld.and_(a, b) if op == "and" else bld.or_(a, b)
        if base == "bool":
            # arithmetic on bools: as numpy does for +, * (logical or / and)
            if op in ("add", "max"):
                return bld.or_(a, b)
            if op in ("mul", "min"):
                return bld.and_(a, b)
            raise Error(f"the operation {op} is not defined on bool")
        if E.is_float(base):
            return self.float_binop(op, a, b)
        return self.int_binop(op, a, b, base, b_expr)

    def float_binop(self, op: str, a, b):
        bld = self.builder
        if op == "add":
            return bld.fadd(a, b, flags=FAST)
        if op == "sub":
            return bld.fsub(a, b, flags=FAST)
        if op == "mul":
            return bld.fmul(a, b, flags=FAST)
        if op == "div":
            return bld.fdiv(a, b)
        if op == "fmod":
            return bld.frem(a, b)
        if op == "floordiv":
            return self.call_intrinsic("floor", bld.fdiv(a, b))
        if op == "floormod":
            # numpy's remainder: a - floor(a / b) * b, sign of b
            q = self.call_intrinsic("floor", bld.fdiv(a, b))
            return bld.fsub(a, bld.fmul(q, b))
        if op in ("min", "max"):
            # numpy propagates NaN from either side: pick a when a wins or a is NaN.
            wins = bld.fcmp_ordered(">" if op == "max" else "<", a, b)
            return bld.select(bld.or_(wins, bld.fcmp_unordered("uno", a, a)), a, b)
        if op == "pow":
            return self.call_intrinsic("pow", a, b)
        raise Error(f"the llvm backend does not support the float operation {op}")

    def int_binop(self, op: str, a, b, base: str, b_expr=None):
        bld = self.builder
        unsigned = E.is_uint(base)
        nsw = ("nsw",) if base == "int64" else ()  # index arithmetic; narrower ints wrap like numpy
        if op == "add":
            return bld.add(a, b, flags=nsw)
        if op == "sub":
            return bld.sub(a, b, flags=nsw)
        if op == "mul":
            return bld.mul(a, b, flags=nsw)
        if op in ("min", "max"):
            cmp = bld.icmp_unsigned if unsigned else bld.icmp_signed
            return bld.select(cmp("<" if op == "min" else ">", a, b), a, b)
        if op == "pow":
            f64 = ir.DoubleType()
            to_f = bld.uitofp if unsigned else bld.sitofp
            ty = a.type
            fty = ir.VectorType(f64, ty.count) if isinstance(ty, ir.VectorType) else f64
            r = self.call_intrinsic("pow", to_f(a, fty), to_f(b, fty))
            return bld.fptoui(r, ty) if unsigned else bld.fptosi(r, ty)
        if op in ("div", "floordiv", "floormod", "fmod"):
            return self.int_division(op, a, b, unsigned, b_expr)
        raise Error(f"the llvm backend does not support the integer operation {op}")

    def int_division(self, op: str, a, b, unsigned: bool, b_expr=None):
        """C division for ``div``/``fmod``, floor division for ``floordiv``/``floormod``.

        x86 traps on a zero divisor and on MIN // -1; like numpy, a zero divisor gives 0 and -1 negates
        (wrapping). The checks cost a compare and a select, and are skipped for constant divisors.
        """
        bld = self.builder
        k = b_expr.value if isinstance(b_expr, E.Const) else None
        if k == 0:
            return self.const_of(a.type, 0)
        if k is not None and k > 0 and k & (k - 1) == 0 and op in ("floordiv", "floormod") and not unsigned:
            # floor semantics by a power of two are exactly a shift and a mask on two's complement
            if op == "floordiv":
                return bld.ashr(a, self.const_of(a.type, int(math.log2(k))))
            return bld.and_(a, self.const_of(a.type, k - 1))
        zero = self.const_of(a.type, 0)
        is_zero = is_minus_one = None
        if k is None:
            is_zero = bld.icmp_unsigned("==", b, zero)
            unsafe = is_zero
            if not unsigned:
                is_minus_one = bld.icmp_signed("==", b, self.const_of(a.type, -1))
                unsafe = bld.or_(is_zero, is_minus_one)
            b = bld.select(unsafe, self.const_of(a.type, 1), b)
        if unsigned:
            out = bld.udiv(a, b) if op in ("div", "floordiv") else bld.urem(a, b)
        elif op == "div":
            out = bld.sdiv(a, b)
        elif op == "fmod":
            out = bld.srem(a, b)
        else:
            q, r = bld.sdiv(a, b), bld.srem(a, b)
            # the remainder is nonzero and its sign differs from the divisor's: round down once more
            adjust = bld.and_(bld.icmp_signed("!=", r, zero), bld.icmp_signed("<", bld.xor(r, b), zero))
            if op == "floordiv":
                out = bld.sub(q, bld.zext(adjust, a.type))
            else:
                out = bld.add(r, bld.select(adjust, b, zero))
        if is_minus_one is not None:
            out = bld.select(is_minus_one, bld.sub(zero, a) if op in ("div", "floordiv") else zero, out)
        return out if is_zero is None else bld.select(is_zero, zero, out)

    def compare(self, op: str, a, b, base: str):
        sym = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[op]
        if E.is_float(base):
            if op == "ne":
                return self.builder.fcmp_unordered("!=", a, b)  # NaN != x is True
            return self.builder.fcmp_ordered(sym, a, b)
        if E.is_uint(base) or base == "bool":
            return self.builder.icmp_unsigned(sym, a, b)
        return self.builder.icmp_signed(sym, a, b)

    # -- intrinsic calls --------------------------------------------------------------------------
    def expr_Call(self, e: E.Call):
        if e.name == "if_then_else":
            return self.if_then_else(e)
        if e.name == "barrier":
            return ir.Constant(I32, 0)  # one thread per work item on a CPU: nothing to wait for
        args = [self.expr(a) for a in e.args]
        lanes = max(_lanes(a.dtype) for a in e.args) if e.args else 1
        if lanes > 1:
            args = [self.splat(a, lanes) for a in args]
        base = E.split_lanes(e.args[0].dtype)[0] if e.args else E.split_lanes(e.dtype)[0]
        return self.math(e.name, args, base, e)

    def expr_TensorIntrinCall(self, e: E.TensorIntrinCall):
        """A tensor intrinsic (``te.tensorize``): its IR comes from ``intrinsics.py``."""
        from nnvm_backend_llvm.intrinsics import emit_tensor_intrin

        return emit_tensor_intrin(self, e)

    def math(self, name: str, args: list, base: str, e: E.Call):
        bld = self.builder
        x = args[0] if args else None
        if name == "not":
            return bld.not_(x)
        if name == "isnan":
            return bld.fcmp_unordered("uno", x, x) if E.is_float(base) else self.const_of(
                value_type(E.with_lanes("bool", _lanes(e.dtype))), 0)
        if name in ("pow", "fmod", "min", "max"):
            return self.binop(name, args[0], args[1], base)
        if not E.is_float(base):
            return self.int_math(name, x, base, e)
        inline = self.inline_math(name, x)
        if inline is not None:
            return inline
        if name in LLVM_UNARY:
            return self.call_intrinsic(LLVM_UNARY[name], x)
        if name == "rsqrt":
            return bld.fdiv(self.const_of(x.type, 1.0), self.call_intrinsic("sqrt", x))
        if name == "sigmoid":
            one = self.const_of(x.type, 1.0)
            minus_x = bld.fneg(x)
            e = self.inline_math("exp", minus_x) or self.call_intrinsic("exp", minus_x)
            return bld.fdiv(one, bld.fadd(one, e))
        if name == "sign":
            zero, one = self.const_of(x.type, 0.0), self.const_of(x.type, 1.0)
            neg = bld.select(bld.fcmp_ordered("<", x, zero), bld.fneg(one), x)  # keeps 0, -0 and NaN
            return bld.select(bld.fcmp_ordered(">", x, zero), one, neg)
        if name in LIBM_UNARY:
            return self.lanewise(x, lambda v: self.libm(LIBM_UNARY[name], v))
        raise Error(f"kernel {self.frame.name}: the intrinsic {name} is not supported by the llvm backend")

    def int_math(self, name: str, x, base: str, e: E.Call):
        bld = self.builder
        zero = self.const_of(x.type, 0)
        if name in ("floor", "ceil", "round", "trunc"):
            return x
        if name == "abs":
            if E.is_uint(base):
                return x
            return bld.select(bld.icmp_signed("<", x, zero), bld.sub(zero, x), x)
        if name == "sign":
            if E.is_uint(base):
                return bld.zext(bld.icmp_unsigned("!=", x, zero), x.type)
            pos = bld.zext(bld.icmp_signed(">", x, zero), x.type)
            neg = bld.zext(bld.icmp_signed("<", x, zero), x.type)
            return bld.sub(pos, neg)
        raise Error(f"kernel {self.frame.name}: the intrinsic {name} needs a float operand, "
                    f"got {base} in {e!r}; cast it first")

    def libm(self, names: tuple, v):
        """Call the C math library's float or double version; half goes through float."""
        ty = v.type
        if isinstance(ty, ir.DoubleType):
            return self.builder.call(self.declare(names[1], ty, [ty], attrs=("nounwind", "readnone")), [v])
        f32 = ir.FloatType()
        x = v if isinstance(ty, ir.FloatType) else self.builder.fpext(v, f32)
        r = self.builder.call(self.declare(names[0], f32, [f32], attrs=("nounwind", "readnone")), [x])
        return r if isinstance(ty, ir.FloatType) else self.builder.fptrunc(r, ty)

    # -- lazy conditional -------------------------------------------------------------------------
    def if_then_else(self, e: E.Call):
        """Evaluate only the chosen side (it may read out of bounds otherwise)."""
        cond_e, t_e, f_e = e.args
        if _lanes(cond_e.dtype) > 1:
            return self.masked_select(e)
        cond = self.expr(cond_e)
        bld = self.builder
        then_bb = bld.append_basic_block("ite.then")
        else_bb = bld.append_basic_block("ite.else")
        merge_bb = bld.append_basic_block("ite.end")
        bld.cbranch(cond, then_bb, else_bb)
        lanes = _lanes(e.dtype)
        bld.position_at_end(then_bb)
        t = self.expr(t_e)
        t = self.splat(t, lanes) if lanes > 1 else t
        t_end = bld.block
        bld.branch(merge_bb)
        bld.position_at_end(else_bb)
        f = self.expr(f_e)
        f = self.splat(f, lanes) if lanes > 1 else f
        f_end = bld.block
        bld.branch(merge_bb)
        bld.position_at_end(merge_bb)
        phi = bld.phi(t.type)
        phi.add_incoming(t, t_end)
        phi.add_incoming(f, f_end)
        return phi

    def masked_select(self, e: E.Call):
        """Vector ``if_then_else``: each side's loads only touch the lanes that side is chosen for."""
        cond_e, t_e, f_e = e.args
        lanes = _lanes(cond_e.dtype)
        cond = self.expr(cond_e)
        outer = self.frame.mask
        t_mask = cond if outer is None else self.builder.and_(outer, cond)
        not_cond = self.builder.not_(cond)
        f_mask = not_cond if outer is None else self.builder.and_(outer, not_cond)
        try:
            self.frame.mask = t_mask
            t = self.splat(self.expr(t_e), lanes)
            self.frame.mask = f_mask
            f = self.splat(self.expr(f_e), lanes)
        finally:
            self.frame.mask = outer
        return self.builder.select(cond, t, f)

    # -- memory -----------------------------------------------------------------------------------
    def buffer_ptr(self, buf):
        try:
            return self.frame.buffers[buf]
        except KeyError:
            raise Error(f"kernel {self.frame.name}: the buffer {buf.name} is used outside its allocation"
                        ) from None

    def element_ptr(self, buf, index):
        elem = scalar_type(E.split_lanes(buf.dtype)[0], in_memory=True)
        return self.builder.gep(self.buffer_ptr(buf), [index], inbounds=True, source_etype=elem)

    def contiguous_base(self, index: E.Expr):
        """The first index of a stride-1 Ramp (the common vector access), else None."""
        if isinstance(index, E.Ramp) and isinstance(index.stride, E.Const) and index.stride.value == 1:
            return index.base
        return None

    def lane_indices(self, index: E.Expr, lanes: int) -> list:
        """Scalar i64 indices of each lane of a vector index."""
        if isinstance(index, E.Ramp):
            base, stride = self.index(index.base), self.index(index.stride)
            return [base if k == 0 else self.builder.add(base, self.builder.mul(stride, ir.Constant(I64, k)))
                    for k in range(lanes)]
        vec = self.index(index)
        return [self.builder.extract_element(vec, ir.Constant(I32, k)) for k in range(lanes)]

    def expr_Load(self, e: E.Load):
        buf = e.buffer
        base = E.split_lanes(buf.dtype)[0]
        mem_ty = scalar_type(base, in_memory=True)
        align = byte_size(base)
        lanes = _lanes(e.dtype)
        if _lanes(e.index.dtype) == 1:
            v = self.builder.load(self.element_ptr(buf, self.index(e.index)), align=align, typ=mem_ty)
            v = self.from_memory(v, base)
            return self.splat(v, lanes) if lanes > 1 else v
        vty = ir.VectorType(mem_ty, lanes)
        mask = self.frame.mask
        start = self.contiguous_base(e.index)
        if start is not None:
            ptr = self.element_ptr(buf, self.index(start))
            if mask is None:
                v = self.builder.load(ptr, align=align, typ=vty)
            else:
                fn = self.intrinsic("masked.load", vty, [PTR, I32, mask.type, vty], [vty, PTR])
                v = self.builder.call(fn, [ptr, ir.Constant(I32, align), mask, ir.Constant(vty, None)])
            return self.from_memory(v, base)
        # gather: one scalar load per lane (LLVM may turn the sequence into a gather instruction)
        out = ir.Constant(vty, None)
        for k, idx in enumerate(self.lane_indices(e.index, lanes)):
            lane = ir.Constant(I32, k)
            if mask is None:
                out = self.builder.insert_element(
                    out, self.builder.load(self.element_ptr(buf, idx), align=align, typ=mem_ty), lane)
                continue
            out = self._masked_lane_load(out, mask, lane, buf, idx, mem_ty, align)
        return self.from_memory(out, base)

    def _masked_lane_load(self, vec, mask, lane, buf, idx, mem_ty, align):
        bld = self.builder
        before = bld.block
        load_bb = bld.append_basic_block("lane.load")
        done_bb = bld.append_basic_block("lane.done")
        bld.cbranch(bld.extract_element(mask, lane), load_bb, done_bb)
        bld.position_at_end(load_bb)
        loaded = bld.insert_element(vec, bld.load(self.element_ptr(buf, idx), align=align, typ=mem_ty), lane)
        bld.branch(done_bb)
        bld.position_at_end(done_bb)
        phi = bld.phi(vec.type)
        phi.add_incoming(vec, before)
        phi.add_incoming(loaded, load_bb)
        return phi

    def from_memory(self, v, base: str):
        if base == "bool":
            return self.builder.icmp_unsigned("!=", v, self.const_of(v.type, 0))
        return v

    def to_memory(self, v, base: str):
        if base == "bool":
            ty = ir.VectorType(I8, v.type.count) if isinstance(v.type, ir.VectorType) else I8
            return self.builder.zext(v, ty)
        return v
