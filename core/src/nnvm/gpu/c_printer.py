"""C-family source for lowered GPU kernels, written once: OpenCL, CUDA and Metal subclass it.

Input is a kernel from ``nnvm.gpu.kernels.lower_for_gpu`` (thread loops outermost, shared allocations at
block level) after ``nnvm.tir.vectorize``. Everything that is the same in every C dialect (loops,
stores, arithmetic, constants, unique names) lives here; a language is a subclass that fills in what
differs, each one class attribute or small method below the ``language`` marker:

- spelling: ``kernel_prefix``, ``global_qualifier``, ``shared_qualifier``, ``restrict``, ``index_type``,
  ``index32_type`` (32-bit indices where ``fits_int32`` proves them safe),
  ``scalar_types`` (type names), ``reserved`` and ``reserved_prefixes`` (names a value may not take),
  ``math_names`` (intrinsic -> function), ``inf_literal``/``nan_literal``;
- kernels: ``param`` (one parameter declaration), ``extra_params`` (thread indices passed as parameters,
  say), ``signature``, ``thread_index``, ``barrier``, ``preamble``;
- statements and expressions whose C syntax a language does not share (WGSL's): ``declare`` (a named
  constant), ``loop_header``, ``guarded`` (a predicated statement), ``declare_array``, ``discard``,
  ``ternary``, ``int_floordiv``/``int_floormod``, ``bool_to_storage``;
- vectors: ``vector_type``, ``vector_load``/``vector_store``, ``broadcast`` (a splat), ``vector_binary``
  (``a * b`` where the language has operators, a helper call where it has none), ``vector_call`` (a
  math function on vectors), ``vector_cast``;
- ``scalar_load``/``scalar_store``/``storage_type``/``alloc_type`` for types kept apart in memory (half).

The base spells plain C and raises ``NotImplementedError`` for what plain C has no spelling of (thread
indices, barriers, vectors), so a missing piece of a language is an error, never another language's
syntax. ``nnvm_backend_opencl.printer`` is the OpenCL subclass.
"""

from __future__ import annotations

import math

from nnvm.errors import Error
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.simplify import Simplifier
from nnvm.tir.visit import walk

# Integer division rounding toward minus infinity, for any integer type; C's ``/`` truncates.
FLOOR_MACROS = """\
#define NNVM_FLOORDIV(a, b) (((a) / (b)) - ((((a) % (b)) != 0) & (((a) < 0) != ((b) < 0))))
#define NNVM_FLOORMOD(a, b) ((a) - NNVM_FLOORDIV(a, b) * (b))
"""

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "fmod_int": "%", "eq": "==", "ne": "!=", "lt": "<",
          "le": "<=", "gt": ">", "ge": ">=", "and": "&&", "or": "||"}

# C's keywords and type names, the C99 math functions the printer calls, and the names the preamble
# defines: a value named like one of them is renamed. Languages add their own (``reserved = CPrinter.reserved
# | {...}``).
C_RESERVED = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int long
register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
bool true false main
acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp exp2 expm1 fabs fdim floor
fma fmax fmin fmod frexp hypot ilogb ldexp lgamma log log2 log10 log1p logb modf nan nextafter pow remainder
remquo rint round rsqrt sin sinh sqrt tan tanh tgamma trunc abs max min isnan isinf isfinite signbit
printf assert NAN INFINITY NNVM_FLOORDIV NNVM_FLOORMOD
""".split())

C_SCALAR_TYPES = {
    "float16": "half", "float32": "float", "float64": "double", "int8": "signed char", "int16": "short",
    "int32": "int", "int64": "long long", "uint8": "unsigned char", "uint16": "unsigned short",
    "uint32": "unsigned int", "uint64": "unsigned long long", "bool": "bool",
}


class CPrinter:
    """Prints kernels in a C dialect. Subclasses override the language hooks only."""

    # -- language --------------------------------------------------------------------------------
    kernel_prefix = "void"
    global_qualifier = ""
    shared_qualifier = ""
    restrict = ""
    index_type = "long"  # loop and thread index variables (64-bit: indices of large tensors)
    # the same in 32 bits, used for a kernel where ``fits_int32`` holds (None: always ``index_type``): a
    # GPU spends one register per 32 bits of every live index and emulates 64-bit division
    index32_type: str | None = None
    scalar_types = C_SCALAR_TYPES
    reserved = C_RESERVED
    reserved_prefixes: tuple = ()  # whole families of builtins (OpenCL's ``vload*``, ``convert_*``)
    # intrinsic -> the language's function; ``None`` entries are spelled by ``math`` itself
    math_names = {"round": "rint", "abs": "fabs"}
    inf_literal = "INFINITY"
    nan_literal = "NAN"

    helper_qualifier = "static inline"  # how a helper function the kernels call is declared

    def preamble(self, source: str) -> str:
        """Lines before the kernels (extension pragmas, helper macros and functions) given the kernels'
        text; printed after the kernels, so it holds every helper they used."""
        return FLOOR_MACROS + self.helper_text()

    def helper(self, name: str, definition: str) -> str:
        """``name``, with its ``definition`` printed once in the preamble, in first-use order."""
        self._helpers.setdefault(name, definition)
        return name

    def helper_text(self) -> str:
        return "".join(d + "\n" for d in self._helpers.values())

    def integer_pow(self, dtype: str, exp_dtype: str) -> str:
        """The helper computing ``a ** b`` for scalar integers exactly. ``pow`` through a float type is
        exact only where the language's pow is correctly rounded: CUDA's (within 2 ulp) gave 3 ** 1 = 2,
        and Metal has no double. Squaring, wrapping as numpy does (unsigned 64-bit, then narrowed); a
        negative exponent truncates toward zero: 1 for a == 1, +-1 for a == -1, else 0 (0 ** -n too)."""
        t, e, wide = self.type_name(dtype), self.type_name(exp_dtype), self.scalar_types["uint64"]
        name = f"nnvm_ipow_{dtype}_{exp_dtype}"
        return self.helper(name, " ".join(filter(None, [
            self.helper_qualifier, f"{t} {name}({t} a, {e} b) {{",
            "if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);",
            f"{wide} r = 1, x = ({wide})a;",
            f"for (; b > 0; b >>= 1) {{ if (b & 1) r *= x; x *= x; }} return ({t})r; }}"])))

    def param(self, buffer, name: str) -> str:
        """One kernel parameter: a pointer to the buffer's storage type, with the language's qualifiers."""
        words = [self.global_qualifier, f"{self.storage_type(buffer.dtype)}*", self.restrict, name]
        return " ".join(w for w in words if w)

    def extra_params(self, func) -> list:
        """Parameters after the buffers (Metal passes thread indices as attributed parameters)."""
        return []

    def signature(self, func, params: list) -> str:
        """The kernel's first line, up to its opening brace."""
        return f"{self.kernel_prefix} {func.name}({', '.join(params)}) {{"

    def thread_value(self, tag: str) -> str:
        """A thread index converted to the kernel's index type."""
        return f"({self._index}){self.thread_index(tag)}"

    # Statements C spells one way and other languages (WGSL) another.
    def declare(self, type_name: str, name: str, value: str) -> str:
        """A named constant of the loop program (a let, a thread index)."""
        return f"const {type_name} {name} = {value};"

    def loop_header(self, var: str, lo: str, end: str) -> str:
        return f"for ({self._index} {var} = {lo}; {var} < {end}; ++{var}) {{"

    def guarded(self, cond: str, line: str) -> str:
        """``line`` (one statement) run only where ``cond`` holds."""
        return f"if ({cond}) {line}"

    def declare_array(self, buffer, name: str, size: int) -> str:
        """A shared or local array of ``size`` elements allocated inside a kernel."""
        qual = self.shared_qualifier + " " if buffer.scope == "shared" and self.shared_qualifier else ""
        return f"{qual}{self.alloc_type(buffer)} {name}[{size}];"

    def tensor_intrin_call(self, call: E.TensorIntrinCall) -> str:
        """A tensor intrinsic the language's backend offers (``Backend.tensor_intrinsics``), as an expression
        evaluated for its effect; none by default."""
        raise self._error(f"tensor intrinsic {call.intrin.name} has no C-family implementation: tensorize "
                          "with it only for a backend that implements it")

    def discard(self, value: str) -> str:
        """A call evaluated for its effect."""
        return f"(void)({value});"

    def ternary(self, cond: str, true_value: str, false_value: str) -> str:
        return f"(({cond}) ? ({true_value}) : ({false_value}))"

    def int_floordiv(self, a: str, b: str, dtype: str) -> str:
        """Integer division rounding toward minus infinity (C's ``/`` truncates)."""
        return f"NNVM_FLOORDIV({a}, {b})"

    def int_floormod(self, a: str, b: str, dtype: str) -> str:
        return f"NNVM_FLOORMOD({a}, {b})"

    def bool_to_storage(self, value: str) -> str:
        """A bool value as the byte a bool buffer holds."""
        return f"({self.storage_type('bool')})({value})"

    def thread_index(self, tag: str) -> str:
        """The expression of a block or thread index, e.g. ``get_local_id(0)`` for ``threadIdx.x``."""
        raise NotImplementedError(f"{type(self).__name__} must spell thread indices")

    def barrier(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} must spell the barrier")

    def type_name(self, dtype: str) -> str:
        base, lanes = E.split_lanes(dtype)
        name = self.scalar_types[base]
        return name if lanes == 1 else self.vector_type(name, lanes)

    def vector_type(self, scalar: str, lanes: int) -> str:
        """The vector of ``lanes`` elements of the scalar type named ``scalar``."""
        return f"{scalar}{lanes}"

    def storage_type(self, dtype: str) -> str:
        """Element type of a buffer in memory (``bool`` is a byte in every dialect)."""
        return self.scalar_types["uint8"] if dtype == "bool" else self.type_name(dtype)

    def alloc_type(self, buffer) -> str:
        """Element type of a buffer allocated inside a kernel (shared or local)."""
        return self.storage_type(buffer.dtype)

    def scalar_load(self, buffer, buf: str, index: str) -> str:
        return f"{buf}[{index}]"

    def scalar_store(self, buffer, buf: str, index: str, value: str) -> str:
        return f"{buf}[{index}] = {value}"

    def vector_load(self, buf: str, base: str, dtype: str) -> str:
        raise NotImplementedError(f"{type(self).__name__} must spell vector loads")

    def vector_store(self, buf: str, base: str, value: str, dtype: str) -> str:
        raise NotImplementedError(f"{type(self).__name__} must spell vector stores")

    def broadcast(self, value: str, dtype: str) -> str:
        """A vector of ``dtype`` with every lane ``value``."""
        raise NotImplementedError(f"{type(self).__name__} must spell vector splats")

    def vector_binary(self, op: str, a: str, b: str, dtype: str) -> str:
        """``a op b`` on vectors (``op`` an infix operator such as ``*``); the default uses the operator."""
        return f"({a} {op} {b})"

    def vector_call(self, name: str, args: list, dtype: str) -> str:
        """A math function on vectors; the default assumes overloads (OpenCL's and Metal's builtins)."""
        return f"{name}({', '.join(args)})"

    def vector_cast(self, value: str, dtype: str, from_dtype: str) -> str:
        raise NotImplementedError(f"{type(self).__name__} must spell vector conversions")

    def cast(self, value: str, dtype: str, from_dtype: str) -> str:
        if E.split_lanes(dtype)[1] > 1:
            return self.vector_cast(value, dtype, from_dtype)
        if dtype == "bool":
            return f"({value} != 0)"
        return f"(({self.type_name(dtype)})({value}))"

    def call(self, name: str, args: list, dtype: str) -> str:
        """A function call on scalars or, through ``vector_call``, on vectors of ``dtype``."""
        fn = self.math_names.get(name, name)
        if E.split_lanes(dtype)[1] > 1:
            return self.vector_call(fn, args, dtype)
        return f"{fn}({', '.join(args)})"

    def math(self, name: str, args: list, dtype: str) -> str:
        """A math intrinsic (``nnvm.tir.expr.INTRINSICS``) built from the language's functions."""
        x = args[0] if args else ""
        if name == "sigmoid":
            one = self.const(E.const(1, dtype))  # a vector one for a vector sigmoid
            return self._arith("div", one, self._arith("add", one, self.call("exp", [f"(-({x}))"], dtype),
                                                        dtype), dtype)
        if name == "not":
            return f"(!{x})"
        if name == "abs" and not E.is_float(dtype):
            return f"(({x}) < 0 ? -({x}) : ({x}))"
        if name == "isnan":
            return f"({self.call('isnan', [x], dtype)} != 0)"
        if name == "sign" and not E.is_float(dtype):
            return f"((({x}) > 0) - (({x}) < 0))"
        if name == "exp_bounded":  # the bound only shortens a CPU's inline exp
            name = "exp"
        return self.call(name, args, dtype)

    def _arith(self, op: str, a: str, b: str, dtype: str) -> str:
        if E.split_lanes(dtype)[1] > 1:
            return self.vector_binary(_INFIX[op], a, b, dtype)
        return f"({a} {_INFIX[op]} {b})"

    # -- names -----------------------------------------------------------------------------------
    def __init__(self):
        self._names: dict = {}
        self._used: set = set()
        self._ranges: dict = {}  # loop variable -> (lo, hi), so provably non-negative divisions print as /
        self._kernel = ""  # the kernel being printed, named by every error
        self._index = self.index_type  # the index type of the kernel being printed
        self._helpers: dict = {}  # helper function name -> definition (``helper``)

    def name_of(self, obj) -> str:
        """A C identifier for a Var or Buffer, unique within the kernel."""
        if obj in self._names:
            return self._names[obj]
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in obj.name) or "v"
        if base[0].isdigit():
            base = "v" + base
        if base in self.reserved or (self.reserved_prefixes and base.startswith(self.reserved_prefixes)):
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
        self._index = self.index32_type if self.index32_type and fits_int32(func) else self.index_type
        params = [self.param(b, self.name_of(b)) for b in func.params] + self.extra_params(func)
        lines = [self.signature(func, params)]
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
                out.append(pad + self.declare(self._index, var, self.thread_value(s.thread_tag)))
                self.stmt(s.body, ind, out)
                return
            lo, ext = self.expr(s.min), self.expr(s.extent)
            end = ext if lo in ("0", "0L") else f"{lo} + {ext}"
            out.append(pad + self.loop_header(var, lo, end))
            self.stmt(s.body, ind + 1, out)
            out.append(f"{pad}}}")
        elif isinstance(s, S.Store):
            line = self._store(s)
            if s.predicate is not None:
                line = self.guarded(self.expr(s.predicate), line)
            out.append(pad + line)
        elif isinstance(s, S.Allocate):
            buf = s.buffer
            size = 1
            for d in buf.shape:
                d = E.convert(d)
                if not isinstance(d, E.Const):
                    raise self._error(f"buffer {buf.name} needs a constant size in a kernel, got {d}")
                size *= int(d.value)
            out.append(pad + self.declare_array(buf, self.name_of(buf), max(size, 1)))
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
                out.append(pad + self.discard(self.expr(s.value)))
        elif isinstance(s, S.LetStmt):
            name = self.name_of(s.var)
            out.append(pad + self.declare(self.type_name(s.var.dtype), name, self.expr(s.value)))
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
            value = self.bool_to_storage(value)
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
                text = self.nan_literal
            elif math.isinf(v):
                text = self.inf_literal if v > 0 else f"(-{self.inf_literal})"
            else:
                text = repr(v)
                if "e" not in text and "." not in text:
                    text += ".0"
            if base == "float32":
                return text if text in (self.nan_literal, self.inf_literal) or text[0] == "(" else text + "f"
            return text if base == "float64" else f"(({self.type_name(base)}){text}f)"
        v = int(c.value)
        if base == "int64" and self._index == self.index32_type and INT32[0] < v <= INT32[1]:
            return str(v)  # an int: C promotes it where the other operand is 64-bit (see fits_int32)
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
                return self.ternary(*(self.expr(a) for a in e.args))
            return self.math(e.name, [self.expr(a) for a in e.args], e.dtype)
        if isinstance(e, E.Cast):
            return self.cast(self.expr(e.value), e.dtype, e.value.dtype)
        if isinstance(e, E.Select):
            return self.ternary(self.expr(e.cond), self.expr(e.true_value), self.expr(e.false_value))
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
                return f"({self.scalar_load(e.buffer, buf, self.expr(e.index))} != 0)"
            return self.scalar_load(e.buffer, buf, self.expr(e.index))
        if isinstance(e, E.TensorIntrinCall):
            return self.tensor_intrin_call(e)
        raise self._error(f"the C printer cannot print expression node {type(e).__name__}: {e!r}")

    def _binop(self, e: E.BinOp) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        flt = E.is_float(e.a.dtype)
        dtype = e.dtype if e.op not in _INFIX or e.op in ("add", "sub", "mul", "div") else e.a.dtype
        if e.op in ("min", "max"):
            if E.split_lanes(e.dtype)[0] == "float16" and E.split_lanes(e.dtype)[1] == 1:
                # no half overloads everywhere: a comparison
                return f"(({a}) {'<' if e.op == 'min' else '>'} ({b}) ? ({a}) : ({b}))"
            return self.call(f"{'f' if flt else ''}{e.op}", [a, b], e.dtype)
        if e.op in ("floordiv", "floormod") and not flt and self._non_negative(e.a, e.b):
            return self._arith("div" if e.op == "floordiv" else "fmod_int", a, b, dtype)
        if e.op == "floordiv":
            return self.call("floor", [self._arith("div", a, b, dtype)], dtype) if flt else \
                self.int_floordiv(a, b, dtype)
        if e.op == "floormod":
            if not flt:
                return self.int_floormod(a, b, dtype)
            q = self.call("floor", [self._arith("div", a, b, dtype)], dtype)
            return self._arith("sub", a, self._arith("mul", q, b, dtype), dtype)
        if e.op == "fmod":
            return self.call("fmod", [a, b], dtype) if flt else self._arith("fmod_int", a, b, dtype)
        if e.op == "pow":
            if flt:
                return self.call("pow", [a, b], dtype)
            if E.split_lanes(e.dtype)[1] == 1:
                return f"{self.integer_pow(e.a.dtype, e.b.dtype)}({a}, {b})"
            t = self.type_name(e.dtype)
            return f"(({t})pow((double)({a}), (double)({b})))"
        return self._arith(e.op, a, b, dtype)

    def _non_negative(self, a, b) -> bool:
        """Whether ``a >= 0`` and ``b > 0`` follow from the ranges of the enclosing loops."""
        simp = Simplifier(self._ranges)
        return simp.bound(a)[0] >= 0 and simp.bound(b)[0] > 0


INT32 = (-(2 ** 31), 2 ** 31 - 1)


class _Wide(Exception):
    """An index term of the kernel is not provably within 32 bits."""


def fits_int32(func: S.PrimFunc) -> bool:
    """Whether ``func`` computes the same with its loop and thread variables and its int64 constants printed
    as 32-bit ``int``. Then C computes every *pure* int64 term (made of those only) in ``int``, and every
    term with a 64-bit leaf (a load or cast to int64, a let variable, a constant beyond 32 bits) in
    ``long long``, by its usual promotions; so it holds when each buffer has fewer than 2^31 elements,
    each loop has constant bounds within int32 and interval arithmetic over the loops' ranges puts every
    pure term, intermediate results included, within int32. A kernel this cannot prove keeps 64 bits."""
    sizes = [math.prod(int(E.convert(d).value) if isinstance(E.convert(d), E.Const) else 2 ** 31
                       for d in b.shape) for b in func.params]
    ranges: dict = {}  # id(loop variable) -> (lo, hi) over every loop of that variable
    memo: dict = {}

    def collect(n):
        if isinstance(n, S.Allocate):
            sizes.append(math.prod(int(d.value) if isinstance(d, E.Const) else 2 ** 31
                                   for d in map(E.convert, n.buffer.shape)))
        elif isinstance(n, S.For):
            if not (isinstance(n.min, E.Const) and isinstance(n.extent, E.Const)):
                raise _Wide
            lo, hi = int(n.min.value), int(n.min.value) + int(n.extent.value)  # hi: the loop's end test
            old = ranges.get(id(n.var), (lo, hi))
            ranges[id(n.var)] = (min(lo, old[0]), max(hi, old[1]))

    def interval(e):
        """(lo, hi) of a pure int64 term; None for a term with a 64-bit leaf; ``_Wide`` beyond int32."""
        key = id(e)
        if key not in memo:
            memo[key] = r = _pure(e)
            if r is not None and not (INT32[0] < r[0] and r[1] <= INT32[1]):
                raise _Wide
        return memo[key]

    def _pure(e):
        if isinstance(e, E.Const):
            v = int(e.value)
            return (v, v) if INT32[0] < v <= INT32[1] else None
        if isinstance(e, E.Var):
            return ranges.get(id(e))  # a let variable is declared ``long long``
        if isinstance(e, (E.Select, E.Call)) and (isinstance(e, E.Select) or e.name == "if_then_else"):
            t, f = (interval(x) for x in ((e.true_value, e.false_value) if isinstance(e, E.Select)
                                          else e.args[1:]))
            return None if t is None or f is None else (min(t[0], f[0]), max(t[1], f[1]))
        if isinstance(e, E.BinOp):
            a, b = interval(e.a), interval(e.b)
            if a is None or b is None:
                return None
            if e.op in ("min", "max"):
                fn = min if e.op == "min" else max
                return (fn(a[0], b[0]), fn(a[1], b[1]))
            if e.op in ("add", "sub", "mul"):
                cands = [x + y if e.op == "add" else x - y if e.op == "sub" else x * y for x in a for y in b]
                return (min(cands), max(cands))
            if e.op in ("floordiv", "floormod", "div", "fmod") and (b[0] > 0 or b[1] < 0):
                m = max(map(abs, a)) + max(map(abs, b))  # NNVM_FLOORMOD's a - (a / b) * b included
                return (-m, m)
            raise _Wide
        if isinstance(e, E.Cast) or isinstance(e, E.Load) or E.split_lanes(e.dtype)[1] > 1:
            return None  # 64-bit in C: ``(long long)``, a ``long long`` element, vectors of them
        raise _Wide  # no proof for other int64 terms

    def check(n):
        if isinstance(n, E.Expr) and n.dtype == "int64":
            interval(n)

    try:
        walk(func.body, collect)
        if max(sizes, default=0) > INT32[1] or any(not (INT32[0] < lo and hi <= INT32[1])
                                                   for lo, hi in ranges.values()):
            return False
        walk(func.body, check)
    except _Wide:
        return False
    return True


def _is_one(e) -> bool:
    return isinstance(e, E.Const) and e.value == 1
