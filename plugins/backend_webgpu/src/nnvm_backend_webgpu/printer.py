"""WGSL: the core's C-family printer with WebGPU's spelling of what differs.

Buffers are module-scope bindings (``@group(0) @binding(i) var<storage, read_write> k_A: array<f32>``),
named after their kernel so every kernel lives in one module; workgroup arrays are hoisted there too.
Values are typed (``let x: i32``), a ternary is ``select``, a guarded statement needs braces. WGSL
has 32-bit scalars only, so a buffer's elements are stored as follows and computed in 32 bits:

- int64 / uint64: ``vec2`` words, the low word read, a store writing the sign (or zero) extension;
  values are computed in 32 bits (indices always are: a binding holds at most 2 GiB);
- bool, int8, uint8, int16, uint16, float16: packed into ``u32`` words, read with ``extractBits`` or
  ``unpack2x16float``; a kernel that writes such a buffer binds it as ``atomic<u32>``, since two
  threads may write bytes of one word (``atomicAnd`` clears its byte, ``atomicOr`` sets it).

float64 has no type (``WebGPUBackend.unsupported_dtypes``). ``limits`` (the adapter's, from the
backend) are checked per kernel, as CUDA's ptxas report is.
"""

from __future__ import annotations

import math

from nnvm.errors import Error
from nnvm.gpu.c_printer import CPrinter
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.visit import walk

WGSL_RESERVED = frozenset("""
alias array atomic bitcast break case const const_assert continue continuing default diagnostic discard
else enable false fn for if let loop override ptr requires return struct switch true var while i32 u32 f32
f16 bool vec2 vec3 vec4 mat2x2 mat3x3 mat4x4 sampler texture_2d select workgroupBarrier storageBarrier
extractBits insertBits pack2x16float unpack2x16float inverseSqrt atomicLoad atomicAnd atomicOr
uniform storage workgroup private function read write read_write target module self layout
""".split())

# WebGPU's guaranteed limits: what a module needs no more than runs on every WebGPU device.
DEFAULT_LIMITS = {"max_compute_workgroup_size_x": 256, "max_compute_workgroup_size_y": 256,
                  "max_compute_workgroup_size_z": 64, "max_compute_invocations_per_workgroup": 256,
                  "max_compute_workgroups_per_dimension": 65535, "max_storage_buffers_per_shader_stage": 8,
                  "max_compute_workgroup_storage_size": 16384}

# (bits per element, compute type) of the dtypes packed into u32 words.
PACKED = {"bool": (8, "u32"), "uint8": (8, "u32"), "int8": (8, "i32"), "uint16": (16, "u32"),
          "int16": (16, "i32"), "float16": (16, "f32")}
WIDE = {"int64": "vec2<i32>", "uint64": "vec2<u32>"}

ERF = """fn nnvm_erf(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.5f) {
    let z = x * x;
    return x * (1.1283791671f + z * (-0.3761263890f + z * (0.1128379167f + z * (-0.0268661706f
             + z * (0.0052239776f + z * -0.0008548327f)))));
  }
  let t = 1.0f / (1.0f + 0.5f * a);
  let c = t * exp(-a * a - 1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f
          + t * (-0.18628806f + t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f
          + t * (-0.82215223f + t * 0.17087277f)))))))));
  return select(c - 1.0f, 1.0f - c, x >= 0.0f);
}"""

# pow on a negative base: WGSL's pow is exp2(y * log2(x)), undefined for x < 0; C's gives a real
# result for an integral exponent.
POWF = """fn nnvm_pow(x: f32, y: f32) -> f32 {
  let r = pow(abs(x), y);
  if (x >= 0.0f) { return r; }
  if (y != trunc(y)) { return bitcast<f32>(0x7fc00000u); }
  return select(r, -r, (i32(y) & 1) == 1);
}"""


class WGSLPrinter(CPrinter):
    """``@compute`` entry points over module-scope bindings; 32-bit values; packed small types."""

    scalar_types = {"float32": "f32", "float16": "f32", "int32": "i32", "int64": "i32", "int8": "i32",
                    "int16": "i32", "uint32": "u32", "uint64": "u32", "uint8": "u32", "uint16": "u32",
                    "bool": "bool"}
    index_type = "i32"
    reserved = CPrinter.reserved | WGSL_RESERVED
    reserved_prefixes = ("nnvm_", "atomic", "pack", "unpack", "texture", "__")
    math_names = {"round": "round", "fmax": "max", "fmin": "min", "rsqrt": "inverseSqrt", "fabs": "abs"}
    inf_literal = "bitcast<f32>(0x7f800000u)"
    nan_literal = "bitcast<f32>(0x7fc00000u)"
    helper_qualifier = ""

    def __init__(self, limits: dict | None = None):
        super().__init__()
        self.limits = {**DEFAULT_LIMITS, **(limits or {})}
        self._globals: list = []

    # -- kernels ----------------------------------------------------------------------------------
    def kernel(self, func) -> str:
        self._globals, self._kernel = [], func.name
        written: set = set()
        walk(func.body, lambda n: written.add(n.buffer) if isinstance(n, S.Store) else None)
        self._atomic = {b for b in written if b.dtype in PACKED}
        text = super().kernel(func)
        return "\n".join(self._globals) + "\n" + text

    def signature(self, func, params: list) -> str:
        launch = func.attrs.get("launch", {})
        size = [int(launch.get(f"threadIdx.{d}", 1)) for d in "xyz"]
        grid = [int(launch.get(f"blockIdx.{d}", 1)) for d in "xyz"]
        for d, n in zip("xyz", size):
            self._check(n, f"max_compute_workgroup_size_{d}", f"threads along {d}")
        self._check(math.prod(size), "max_compute_invocations_per_workgroup", "threads per workgroup")
        self._check(max(grid), "max_compute_workgroups_per_dimension", "workgroups along one dimension")
        self._check(len(func.params), "max_storage_buffers_per_shader_stage", "storage buffers")
        for i, decl in enumerate(params):
            self._globals.append(f"@group(0) @binding({i}) var<storage, read_write> {decl};")
        return (f"@compute @workgroup_size({', '.join(map(str, size))})\nfn {func.name}("
                "@builtin(workgroup_id) nnvm_gid: vec3<u32>, @builtin(local_invocation_id) nnvm_tid: "
                "vec3<u32>) {")

    def _check(self, value: int, limit: str, what: str) -> None:
        if value > self.limits[limit]:
            raise Error(f"kernel {self._kernel}: {value} {what}, more than this WebGPU device allows "
                        f"({limit} = {self.limits[limit]})")

    def param(self, buffer, name: str) -> str:
        self._names[buffer] = name = f"{self._kernel}_{name}"  # module scope: unique across kernels
        if buffer.dtype in PACKED:
            return f"{name}: array<{'atomic<u32>' if buffer in self._atomic else 'u32'}>"
        if buffer.dtype == "float64":
            raise Error(f"kernel {self._kernel}: float64 is not supported: WGSL has no 64-bit float")
        return f"{name}: array<{WIDE.get(buffer.dtype, self.type_name(buffer.dtype))}>"

    def thread_index(self, tag: str) -> str:
        kind, dim = tag.split(".")
        return f"i32({'nnvm_gid' if kind == 'blockIdx' else 'nnvm_tid'}.{dim})"

    def thread_value(self, tag: str) -> str:
        return self.thread_index(tag)

    def barrier(self) -> str:
        return "workgroupBarrier();"

    def preamble(self, source: str) -> str:
        return self.helper_text()

    # -- statements -------------------------------------------------------------------------------
    def declare(self, type_name: str, name: str, value: str) -> str:
        return f"let {name}: {type_name} = {value};"

    def loop_header(self, var: str, lo: str, end: str) -> str:
        return f"for (var {var}: i32 = {lo}; {var} < {end}; {var}++) {{"

    def guarded(self, cond: str, line: str) -> str:
        return f"if ({cond}) {{ {line} }}"

    def declare_array(self, buffer, name: str, size: int) -> str:
        t = self.type_name("uint32" if buffer.dtype == "bool" else buffer.dtype)
        if buffer.scope != "shared":
            return f"var {name}: array<{t}, {size}>;"
        self._names[buffer] = f"{self._kernel}_{name}"
        self._check(4 * size, "max_compute_workgroup_storage_size", "bytes of workgroup memory")
        self._globals.append(f"var<workgroup> {self._kernel}_{name}: array<{t}, {size}>;")
        return f"// {name}: workgroup memory"

    def discard(self, value: str) -> str:
        return f"_ = {value};"

    def ternary(self, cond: str, true_value: str, false_value: str) -> str:
        return f"select({false_value}, {true_value}, {cond})"

    def bool_to_storage(self, value: str) -> str:
        return f"u32({value})"

    # -- memory -----------------------------------------------------------------------------------
    def scalar_load(self, buffer, buf: str, index: str) -> str:
        if buffer.scope != "global":
            return f"{buf}[{index}]"
        if buffer.dtype in WIDE:
            return f"{buf}[{index}].x"
        if buffer.dtype not in PACKED:
            return f"{buf}[{index}]"
        bits, t = PACKED[buffer.dtype]
        per = 32 // bits
        word = f"{buf}[({index}) / {per}]"
        word = f"atomicLoad(&{word})" if buffer in self._atomic else word
        if buffer.dtype == "float16":
            return f"unpack2x16float({word})[({index}) % 2]"
        word = f"bitcast<i32>({word})" if t == "i32" else word
        return f"extractBits({word}, u32(({index}) % {per}) * {bits}u, {bits}u)"

    def scalar_store(self, buffer, buf: str, index: str, value: str) -> str:
        if buffer.scope != "global" or buffer.dtype not in PACKED and buffer.dtype not in WIDE:
            return f"{buf}[{index}] = {value}"
        if buffer.dtype in WIDE:
            t = WIDE[buffer.dtype]
            hi = "(v >> 31u)" if buffer.dtype == "int64" else "0u"
            self.helper(f"nnvm_wide_{buffer.dtype}", f"fn nnvm_wide_{buffer.dtype}(v: {t[5:8]}) -> {t} "
                        f"{{ return {t}(v, {hi}); }}")
            return f"{buf}[{index}] = nnvm_wide_{buffer.dtype}({value})"
        bits, t = PACKED[buffer.dtype]
        per, mask = 32 // bits, (1 << bits) - 1
        bits_of = f"pack2x16float(vec2<f32>({value}, 0.0f))" if buffer.dtype == "float16" else f"u32({value})"
        shift = f"(u32(({index}) % {per}) * {bits}u)"
        word = f"&{buf}[({index}) / {per}]"
        return (f"atomicAnd({word}, ~({mask}u << {shift})); "
                f"atomicOr({word}, ({bits_of} & {mask}u) << {shift})")

    # -- expressions ------------------------------------------------------------------------------
    def const(self, c: E.Const) -> str:
        base, lanes = E.split_lanes(c.dtype)
        if base in ("float32", "float16", "float64"):  # no vectors: WebGPUBackend.vectors has none
            return super().const(E.Const(c.value, "float32"))
        if base == "bool":
            return "true" if c.value else "false"
        v, t = int(c.value), self.type_name(base)
        lo, hi = (-(2 ** 31), 2 ** 31 - 1) if t == "i32" else (0, 2 ** 32 - 1)
        if not lo <= v <= hi:
            raise self._error(f"the constant {v} ({base}) does not fit WGSL's 32-bit {t}")
        return f"{t}({v})" if v == lo and t == "i32" else f"{v}{t[0]}"

    def cast(self, value: str, dtype: str, from_dtype: str) -> str:
        if dtype == "bool":
            return f"({value} != {self.type_name(from_dtype)}(0))"
        t = self.type_name(dtype)
        if E.is_float(from_dtype) and t == "u32":
            value = f"i32({value})"  # as C on the usual targets: a negative float wraps
        if dtype == "float16":
            return f"unpack2x16float(pack2x16float(vec2<f32>(f32({value}), 0.0f))).x"
        if dtype in PACKED and t != "f32":
            bits = PACKED[dtype][0]
            return f"extractBits({t}({value}), 0u, {bits}u)"
        return f"{t}({value})"

    def math(self, name: str, args: list, dtype: str) -> str:
        x = args[0] if args else ""
        if name == "isnan":
            return f"((bitcast<u32>({x}) & 0x7fffffffu) > 0x7f800000u)"
        if name == "abs" and not E.is_float(dtype):
            return f"abs({x})" if self.type_name(dtype) == "i32" else x
        if name == "sign" and not E.is_float(dtype):
            return f"sign({x})" if self.type_name(dtype) == "i32" else f"min({x}, 1u)"
        if name == "erf":
            return f"{self.helper('nnvm_erf', ERF)}({x})"
        return super().math(name, args, dtype)

    def call(self, name: str, args: list, dtype: str) -> str:
        if name == "fmod":
            return f"({args[0]} % {args[1]})"  # WGSL's % on floats truncates, as fmod does
        if name == "pow":
            return f"{self.helper('nnvm_pow', POWF)}({', '.join(args)})"
        return super().call(name, args, dtype)

    def int_floordiv(self, a: str, b: str, dtype: str) -> str:
        t = self.type_name(dtype)
        if t == "u32":
            return f"({a} / {b})"
        return f"{self._floor_helper(t)}({a}, {b})"

    def int_floormod(self, a: str, b: str, dtype: str) -> str:
        t = self.type_name(dtype)
        if t == "u32":
            return f"({a} % {b})"
        self._floor_helper(t)
        return f"nnvm_floormod({a}, {b})"

    def _floor_helper(self, t: str) -> str:
        self.helper("nnvm_floordiv", "fn nnvm_floordiv(a: i32, b: i32) -> i32 { let q = a / b; "
                    "return select(q, q - 1, (a % b != 0) && ((a < 0) != (b < 0))); }")
        self.helper("nnvm_floormod", "fn nnvm_floormod(a: i32, b: i32) -> i32 { return a - nnvm_floordiv(a, b) "
                    "* b; }")
        return "nnvm_floordiv"

    def integer_pow(self, dtype: str, exp_dtype: str) -> str:
        t, e = self.type_name(dtype), self.type_name(exp_dtype)
        name = f"nnvm_ipow_{t}_{e}"
        neg = "if (b < 0) { return select(select(0, select(1, -1, (b & 1) != 0), a == -1), 1, a == 1); }" \
            if e == "i32" and t == "i32" else ""
        return self.helper(name, f"fn {name}(a: {t}, b0: {e}) -> {t} {{ var b = b0; {neg} var r: {t} = 1{t[0]}; "
                           f"var x = a; for (; b > 0{e[0]}; b = b >> 1u) {{ if ((b & 1{e[0]}) != 0{e[0]}) "
                           "{ r = r * x; } x = x * x; } return r; }")
