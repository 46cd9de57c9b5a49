"""C-family source for lowered GPU kernels, written once: OpenCL, CUDA and Metal subclass it.

Input is a kernel from ``nnvm.tir.gpu.lower_for_gpu`` (thread loops outermost, shared allocations at
block level) after ``nnvm.tir.vectorize``. Everything that is the same in every C dialect (loops,
stores, arithmetic, constants, unique names) lives here; a language is a subclass that fills in the
handful of things that differ, each one method or attribute below the ``language`` marker: the
kernel signature, address-space qualifiers, thread indices, the barrier, type names, vector loads
and stores, casts and math function names. ``nnvm_backend_opencl.printer`` is the OpenCL one.
"""

from __future__ import annotations

import math

from nnvm.errors import Error
from nnvm.tir import expr as E
from nnvm.tir import stmt as S

# Integer division rounding toward minus infinity, for any integer type; C's ``/`` truncates.
FLOOR_MACROS = """\
#define NNVM_FLOORDIV(a, b) (((a) / (b)) - ((((a) % (b)) != 0) & (((a) < 0) != ((b) < 0))))
#define NNVM_FLOORMOD(a, b) ((a) - NNVM_FLOORDIV(a, b) * (b))
"""

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
          "gt": ">", "ge": ">=", "and": "&&", "or": "||"}

# Identifiers a value may not take: C keywords and types, and the builtins of the C dialects (OpenCL C's
# math, common, integer, geometric and relational functions cover CUDA's and Metal's usual names).
RESERVED = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int long
register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
bool half uchar ushort uint ulong size_t true false kernel global local constant private
acos acosh acospi asin asinh asinpi atan atan2 atanh atanpi cbrt ceil copysign cos cosh cospi erf erfc exp
exp2 exp10 expm1 fabs fdim floor fma fmax fmin fmod fract frexp hypot ilogb ldexp lgamma log log2 log10
log1p logb mad modf nan nextafter pow pown powr remainder remquo rint rootn round rsqrt sin sincos sinh
sinpi sqrt tan tanh tanpi tgamma trunc abs abs_diff add_sat hadd rhadd clamp clz mad_hi mad_sat max min
mul_hi rotate sub_sat upsample popcount degrees mix radians step smoothstep sign cross dot distance length
normalize isequal isnotequal isgreater isless isfinite isinf isnan isnormal signbit any all bitselect
select shuffle shuffle2 barrier vload_half vstore_half printf assert main NAN INFINITY
""".split())

_SCALAR_TYPES = {
    "float16": "half", "float32": "float", "float64": "double", "int8": "char", "int16": "short",
    "int32": "int", "int64": "long", "uint8": "uchar", "uint16": "ushort", "uint32": "uint",
    "uint64": "ulong", "bool": "bool",
}


class CPrinter:
    """Prints kernels in a C dialect. Subclasses override the language hooks only."""

    # -- language --------------------------------------------------------------------------------
    kernel_prefix = "void"
    global_qualifier = ""
    shared_qualifier = ""
    restrict = ""
    scalar_types = _SCALAR_TYPES

    def preamble(self, source: str) -> str:
        """Lines before the kernels (extension pragmas, helper macros) given the kernels' text."""
        return FLOOR_MACROS

    def thread_index(self, tag: str) -> str:
        """The expression of a block or thread index, e.g. ``get_local_id(0)`` for ``threadIdx.x``."""
        raise NotImplementedError

    def barrier(self) -> str:
        raise NotImplementedError

    def type_name(self, dtype: str) -> str:
        base, lanes = E.split_lanes(dtype)
        name = self.scalar_types[base]
        return name if lanes == 1 else f"{name}{lanes}"

    def storage_type(self, dtype: str) -> str:
        """Element type of a buffer in memory (``bool`` is a byte in every dialect)."""
        return "uchar" if dtype == "bool" else self.type_name(dtype)

    def alloc_type(self, buffer) -> str:
        """Element type of a buffer allocated inside a kernel (shared or local)."""
        return self.storage_type(buffer.dtype)

    def scalar_load(self, buffer, buf: str, index: str) -> str:
        return f"{buf}[{index}]"

    def scalar_store(self, buffer, buf: str, index: str, value: str) -> str:
        return f"{buf}[{index}] = {value}"

    def vector_load(self, buf: str, base: str, dtype: str) -> str:
        raise NotImplementedError

    def vector_store(self, buf: str, base: str, value: str, dtype: str) -> str:
        raise NotImplementedError

    def broadcast(self, value: str, dtype: str) -> str:
        return f"(({self.type_name(dtype)})({value}))"

    def cast(self, value: str, dtype: str, from_dtype: str) -> str:
        if dtype == "bool":
            return f"({value} != 0)"
        return f"(({self.type_name(dtype)})({value}))"

    def math(self, name: str, args: list, dtype: str) -> str:
        """A math intrinsic; the default spells C99's type-generic names (OpenCL's builtins)."""
        x = args[0] if args else ""
        one = self.const(E.const(1, E.split_lanes(dtype)[0]))
        if name == "sigmoid":
            return f"({one} / ({one} + exp(-({x}))))"
        if name == "not":
            return f"(!{x})"
        if name == "abs":
            return f"fabs({x})" if E.is_float(dtype) else f"(({x}) < 0 ? -({x}) : ({x}))"
        if name == "round":
            return f"rint({x})"
        if name == "isnan":
            return f"(isnan({x}) != 0)"
        if name == "sign" and not E.is_float(dtype):
            return f"((({x}) > 0) - (({x}) < 0))"
        return f"{name}({', '.join(args)})"

    # -- names -----------------------------------------------------------------------------------
    def __init__(self):
        self._names: dict = {}
        self._used: set = set()
        self._ranges: dict = {}  # loop variable -> (lo, hi), so provably non-negative divisions print as /
        self._kernel = ""  # the kernel being printed, named by every error

    def name_of(self, obj) -> str:
        """A C identifier for a Var or Buffer, unique within the kernel."""
        if obj in self._names:
            return self._names[obj]
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in obj.name) or "v"
        if base[0].isdigit():
            base = "v" + base
        if base in RESERVED or base.startswith(("get_", "convert_", "vload", "vstore", "as_", "atomic_")):
            base += "_"
        name, k = base, 1
        while name in self._used:
            name, k = f"{base}_{k}", k + 1
        self._used.add(name)
        self._names[obj] = name
        return name

    def _error(self, message: str) -> Error:
        return Error(f"kernel {self._kernel}: {message}")

    # -- kernels ---------------------------------------------------------------------------------
    def kernel(self, func: S.PrimFunc) -> str:
        """One kernel: signature, then the body with thread loops as index declarations."""
        self._names, self._used, self._ranges, self._kernel = {}, set(), {}, func.name
        params = ", ".join(f"{self.global_qualifier} {self.storage_type(b.dtype)}* {self.restrict} "
                           f"{self.name_of(b)}".replace("  ", " ").strip() for b in func.params)
        lines = [f"{self.kernel_prefix} {func.name}({params}) {{"]
        self.stmt(func.body, 1, lines)
        lines.append("}")
        return "\n".join(lines)

    def program(self, funcs: list) -> str:
        """Every kernel in one source, after the preamble."""
        body = "\n\n".join(self.kernel(f) for f in funcs)
        return self.preamble(body) + "\n" + body + "\n"

    # -- statements ------------------------------------------------------------------------------
    def stmt(self, s, ind: int, out: list) -> None:
        pad = "  " * ind
        if isinstance(s, S.For):
            var = self.name_of(s.var)
            if isinstance(s.min, E.Const) and isinstance(s.extent, E.Const):
                self._ranges[s.var] = (int(s.min.value), int(s.min.value) + int(s.extent.value) - 1)
            if s.kind == S.ForKind.THREAD_BINDING:
                out.append(f"{pad}const long {var} = (long){self.thread_index(s.thread_tag)};")
                self.stmt(s.body, ind, out)
                return
            lo, ext = self.expr(s.min), self.expr(s.extent)
            end = ext if lo == "0L" else f"{lo} + {ext}"
            out.append(f"{pad}for (long {var} = {lo}; {var} < {end}; ++{var}) {{")
            self.stmt(s.body, ind + 1, out)
            out.append(f"{pad}}}")
        elif isinstance(s, S.Store):
            line = self._store(s)
            if s.predicate is not None:
                line = f"if ({self.expr(s.predicate)}) {line}"
            out.append(pad + line)
        elif isinstance(s, S.Allocate):
            buf = s.buffer
            size = 1
            for d in buf.shape:
                d = E.convert(d)
                if not isinstance(d, E.Const):
                    raise self._error(f"buffer {buf.name} needs a constant size in a kernel, got {d}")
                size *= int(d.value)
            qual = self.shared_qualifier + " " if buf.scope == "shared" and self.shared_qualifier else ""
            out.append(f"{pad}{qual}{self.alloc_type(buf)} {self.name_of(buf)}[{max(size, 1)}];")
            self.stmt(s.body, ind, out)
        elif isinstance(s, S.Seq):
            for x in s.stmts:
                self.stmt(x, ind, out)
        elif isinstance(s, S.IfThenElse):
            out.append(f"{pad}if ({self.expr(s.cond)}) {{")
            self.stmt(s.then_body, ind + 1, out)
            if s.else_body is not None:
                out.append(f"{pad}}} else {{")
                self.stmt(s.else_body, ind + 1, out)
            out.append(f"{pad}}}")
        elif isinstance(s, S.Evaluate):
            if isinstance(s.value, E.Call) and s.value.name == "barrier":
                out.append(pad + self.barrier())
            elif not (isinstance(s.value, E.Call) and s.value.name in ("noop", "prefetch")):
                out.append(f"{pad}(void)({self.expr(s.value)});")
        elif isinstance(s, S.LetStmt):
            decl = f"const {self.type_name(s.var.dtype)} {self.name_of(s.var)}"
            out.append(f"{pad}{decl} = {self.expr(s.value)};")
            self.stmt(s.body, ind, out)
        elif isinstance(s, S.AttrStmt):
            out.append(f"{pad}// {s.key} = {s.value}")
            self.stmt(s.body, ind, out)
        else:
            raise self._error(f"the C printer cannot print statement node {type(s).__name__}")

    def _store(self, s: S.Store) -> str:
        buf = self.name_of(s.buffer)
        value = self.expr(s.value)
        lanes = E.split_lanes(s.value.dtype)[1]
        if lanes > 1:
            if not (isinstance(s.index, E.Ramp) and _is_one(s.index.stride)):
                raise self._error(f"store to {s.buffer.name}: only contiguous vector stores can be printed")
            return self.vector_store(buf, self.expr(s.index.base), value, s.value.dtype) + ";"
        if s.buffer.dtype == "bool":
            value = f"(uchar)({value})"
        return self.scalar_store(s.buffer, buf, self.expr(s.index), value) + ";"

    # -- expressions -----------------------------------------------------------------------------
    def const(self, c: E.Const) -> str:
        base, lanes = E.split_lanes(c.dtype)
        if lanes > 1:
            return self.broadcast(self.const(E.Const(c.value, base)), c.dtype)
        if base == "bool":
            return "1" if c.value else "0"
        if base in E.FLOAT_DTYPES:
            v = float(c.value)
            if math.isnan(v):
                text = "NAN"
            elif math.isinf(v):
                text = "INFINITY" if v > 0 else "(-INFINITY)"
            else:
                text = repr(v)
                if "e" not in text and "." not in text:
                    text += ".0"
            if base == "float32":
                return text if text[0] in "(IN" else text + "f"
            return text if base == "float64" else f"(({self.type_name(base)}){text}f)"
        v = int(c.value)
        if base == "int64":
            return f"({v + 1}L - 1L)" if v == -(2 ** 63) else f"{v}L"
        if base == "uint64":
            return f"{v}UL"
        if base == "uint32":
            return f"{v}U"
        if base == "int32":
            return f"({v + 1} - 1)" if v == -(2 ** 31) else str(v)
        return f"(({self.type_name(base)}){v})"

    def expr(self, e) -> str:
        if isinstance(e, E.Var):
            return self.name_of(e)
        if isinstance(e, E.Const):
            return self.const(e)
        if isinstance(e, E.BinOp):
            return self._binop(e)
        if isinstance(e, E.Call):
            if e.name == "if_then_else":
                c, t, f = (self.expr(a) for a in e.args)
                return f"(({c}) ? ({t}) : ({f}))"
            return self.math(e.name, [self.expr(a) for a in e.args], e.dtype)
        if isinstance(e, E.Cast):
            return self.cast(self.expr(e.value), e.dtype, e.value.dtype)
        if isinstance(e, E.Select):
            return f"(({self.expr(e.cond)}) ? ({self.expr(e.true_value)}) : ({self.expr(e.false_value)}))"
        if isinstance(e, E.Broadcast):
            return self.broadcast(self.expr(e.value), e.dtype)
        if isinstance(e, E.Load):
            buf = self.name_of(e.buffer)
            if E.split_lanes(e.dtype)[1] > 1:
                if not (isinstance(e.index, E.Ramp) and _is_one(e.index.stride)):
                    raise self._error(f"load from {e.buffer.name}: only contiguous vector loads can be "
                                      "printed")
                return self.vector_load(buf, self.expr(e.index.base), e.dtype)
            if e.buffer.dtype == "bool":
                return f"({buf}[{self.expr(e.index)}] != 0)"
            return self.scalar_load(e.buffer, buf, self.expr(e.index))
        if isinstance(e, E.TensorIntrinCall):
            raise self._error(f"tensor intrinsic {e.intrin.name} has no C-family implementation: tensorize "
                              "with it only for a backend that implements it")
        raise self._error(f"the C printer cannot print expression node {type(e).__name__}: {e!r}")

    def _binop(self, e: E.BinOp) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        flt = E.is_float(e.a.dtype)
        if e.op in ("min", "max"):
            if E.split_lanes(e.dtype)[0] == "float16":  # no half overloads everywhere: a comparison
                return f"(({a}) {'<' if e.op == 'min' else '>'} ({b}) ? ({a}) : ({b}))"
            return f"{'f' if flt else ''}{e.op}({a}, {b})"
        if e.op in ("floordiv", "floormod") and not flt and self._non_negative(e.a, e.b):
            return f"({a} {'/' if e.op == 'floordiv' else '%'} {b})"  # C's truncation agrees here
        if e.op == "floordiv":
            return f"floor({a} / {b})" if flt else f"NNVM_FLOORDIV({a}, {b})"
        if e.op == "floormod":
            return f"({a} - floor({a} / {b}) * {b})" if flt else f"NNVM_FLOORMOD({a}, {b})"
        if e.op == "fmod":
            return f"fmod({a}, {b})" if flt else f"({a} % {b})"
        if e.op == "pow":
            if flt:
                return f"pow({a}, {b})"
            t = self.type_name(e.dtype)
            return f"(({t})pow((double)({a}), (double)({b})))"
        return f"({a} {_INFIX[e.op]} {b})"

    def _non_negative(self, a, b) -> bool:
        """Whether ``a >= 0`` and ``b > 0`` follow from the ranges of the enclosing loops."""
        from nnvm.tir.simplify import Simplifier

        simp = Simplifier(self._ranges)
        return simp.bound(a)[0] >= 0 and simp.bound(b)[0] > 0


def _is_one(e) -> bool:
    return isinstance(e, E.Const) and e.value == 1
