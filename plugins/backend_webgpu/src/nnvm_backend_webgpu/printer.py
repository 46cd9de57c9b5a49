"""WGSL: the core's C-family printer with WebGPU's spelling of what differs.

Buffers are module-scope bindings (``@group(0) @binding(i) var<storage, read_write> k_A: array<f32>``) named
after their kernel, so every kernel lives in one module (workgroup arrays too). Values are typed (``let x:
i32``), a ternary is ``select``, a guard needs braces. WGSL has 32-bit scalars only: ``wgsl.py`` says how
other dtypes are stored; float64 has none. The adapter's ``limits`` are checked per kernel, as CUDA's are.
"""

from __future__ import annotations

from nnvm.errors import Error
from nnvm.gpu.c_printer import CPrinter
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.visit import walk
from nnvm_backend_webgpu import wgsl
from nnvm_backend_webgpu.wgsl import PACKED, WIDE


class WGSLPrinter(CPrinter):
    """``@compute`` entry points over module-scope bindings; 32-bit values; packed small types."""

    scalar_types, index_type = wgsl.SCALAR_TYPES, "i32"
    reserved = CPrinter.reserved | wgsl.RESERVED
    reserved_prefixes = ("nnvm_", "atomic", "pack", "unpack", "texture", "__")
    math_names = {"round": "round", "fmax": "max", "fmin": "min", "rsqrt": "inverseSqrt", "fabs": "abs"}
    inf_literal, nan_literal = "nnvm_inf()", "nnvm_nan()"  # wgsl.SPECIALS

    def __init__(self, limits: dict | None = None):
        super().__init__()
        self.limits = {**wgsl.DEFAULT_LIMITS, **(limits or {})}

    # -- kernels ----------------------------------------------------------------------------------
    def kernel(self, func) -> str:
        self._globals, self._kernel, self._shared_bytes, self._fold = [], func.name, 0, None
        self._packed = {func.params[i]: words for i, words, _ in func.attrs.get("packed", [])}
        written: set = set()
        walk(func.body, lambda n: written.add(n.buffer) if isinstance(n, S.Store) else None)
        self._atomic = {b for b in written if b.dtype in PACKED}
        text = super().kernel(func)
        return "\n".join(self._globals) + "\n" + text

    def signature(self, func, params: list) -> str:
        launch = func.attrs.get("launch", {})
        size, grid = ([launch.get(f"{k}.{d}", 1) for d in "xyz"] for k in ("threadIdx", "blockIdx"))
        static = wgsl.fold_grid(grid) != grid  # folded here; else maybe at run time (wgsl.fold_at_run)
        self._fold = "y" if launch.get("fold") == "y" else "x" if static or launch.get("fold") else None
        params = [p for b, p in zip(func.params, params) if b not in self._packed]
        params += [f"{self._kernel}_packed: array<u32>"] if self._packed else []  # wgsl.pack_plan
        for value, limit, what in wgsl.launch_needs(size, grid, len(params)):
            self._check(value, limit, what)
        self._globals += wgsl.bindings(params, func.attrs.get("read_only", ()))
        return wgsl.entry_point(func.name, size, grid[0] if static else 0)

    def _check(self, value: int, limit: str, what: str) -> None:
        if value > self.limits[limit]:
            raise Error(f"kernel {self._kernel}: {value} {what}, more than this WebGPU device allows "
                        f"({limit} = {self.limits[limit]})")

    def param(self, buffer, name: str) -> str:
        self._names[buffer] = name = f"{self._kernel}_{name}"  # module scope: unique across kernels
        if buffer.dtype == "float64":
            raise Error(f"kernel {self._kernel}: float64 is not supported: WGSL has no 64-bit float")
        if buffer.dtype in PACKED:
            return f"{name}: array<{'atomic<u32>' if buffer in self._atomic else 'u32'}>"
        return f"{name}: array<{WIDE.get(buffer.dtype, self.type_name(buffer.dtype))}>"

    def thread_index(self, tag: str) -> str:
        if self._fold and tag == f"blockIdx.{self._fold}":
            return wgsl.folded_index(self._fold)
        kind, dim = tag.split(".")
        return f"{'nnvm_gid' if kind == 'blockIdx' else 'nnvm_tid'}.{dim}"

    def thread_value(self, tag: str) -> str:
        return f"i32({self.thread_index(tag)})"

    def barrier(self) -> str:
        return "workgroupBarrier();"

    def preamble(self, source: str) -> str:
        for name, definition in wgsl.specials(source + self.helper_text()).items():
            self.helper(name, definition)
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
        self._shared_bytes += 4 * size  # every element is 32 bits here
        self._check(self._shared_bytes, "max_compute_workgroup_storage_size", "bytes of workgroup memory")
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
        bits, t = PACKED.get(buffer.dtype, (32, self.type_name(buffer.dtype)))
        if buffer in self._packed:  # 32-bit words of one binding, from the parameter's (wgsl.pack_plan)
            i = f"2 * ({index})" if buffer.dtype in WIDE else f"({index}) / {32 // bits}"
            word = f"{self._kernel}_packed[{self._packed[buffer]} + {i}]"
            if bits == 32:
                return f"bitcast<{t}>({word})"
        elif buffer.scope != "global" or bits == 32:
            return f"{buf}[{index}]" + (".x" if buffer.scope == "global" and buffer.dtype in WIDE else "")
        else:
            word = f"{buf}[({index}) / {32 // bits}]"
            word = f"atomicLoad(&{word})" if buffer in self._atomic else word
        if buffer.dtype == "float16":
            return f"unpack2x16float({word})[({index}) % 2]"
        word = f"bitcast<i32>({word})" if t == "i32" else word
        return f"extractBits({word}, u32(({index}) % {32 // bits}) * {bits}u, {bits}u)"

    def scalar_store(self, buffer, buf: str, index: str, value: str) -> str:
        if buffer.scope != "global" or buffer.dtype not in PACKED and buffer.dtype not in WIDE:
            return f"{buf}[{index}] = {value}"
        if buffer.dtype in WIDE:
            wide = self.helper(f"nnvm_wide_{buffer.dtype}", wgsl.wide_store(buffer.dtype))
            return f"{buf}[{index}] = {wide}({value})"
        per, mask = 32 // (bits := PACKED[buffer.dtype][0]), (1 << bits) - 1
        new = f"pack2x16float(vec2<f32>({value}, 0.0f))" if buffer.dtype == "float16" else f"u32({value})"
        shift, word = f"(u32(({index}) % {per}) * {bits}u)", f"&{buf}[({index}) / {per}]"
        v = f"let nnvm_packed = ({new} & {mask}u) << {shift};"  # first: it may read the byte atomicAnd clears
        return f"{{ {v} atomicAnd({word}, ~({mask}u << {shift})); atomicOr({word}, nnvm_packed); }}"

    # -- expressions ------------------------------------------------------------------------------
    def const(self, c: E.Const) -> str:
        base = E.split_lanes(c.dtype)[0]  # no vectors: WebGPUBackend.vectors allows none
        if base in ("float32", "float16", "float64"):
            return super().const(E.Const(c.value, "float32"))
        if base == "bool":
            return "true" if c.value else "false"
        v, t = int(c.value), self.type_name(base)
        lo, hi = (-(2 ** 31), 2 ** 31 - 1) if t == "i32" else (0, 2 ** 32 - 1)
        if base in WIDE:  # 64-bit values are computed in 32 bits: int64's extremes (identities) saturate
            v = min(max(v, lo), hi)
        elif not lo <= v <= hi:
            raise self._error(f"the constant {v} ({base}) does not fit WGSL's 32-bit {t}")
        return f"{t}({v})" if v == lo and t == "i32" else f"{v}{t[0]}"

    def cast(self, value: str, dtype: str, from_dtype: str) -> str:
        t = self.type_name(dtype)
        if dtype == "bool":
            return f"({value} != {self.type_name(from_dtype)}(0))"
        if E.is_float(from_dtype) and t == "u32":
            value = f"i32({value})"  # as C on the usual targets: a negative float wraps
        if dtype == "float16":
            return f"unpack2x16float(pack2x16float(vec2<f32>(f32({value}), 0.0f))).x"
        if dtype in PACKED:
            return f"extractBits({t}({value}), 0u, {PACKED[dtype][0]}u)"
        return f"{t}({value})"

    def math(self, name: str, args: list, dtype: str) -> str:
        x, integer = (args[0] if args else ""), not E.is_float(dtype)
        if name == "isnan":
            return f"((bitcast<u32>({x}) & 0x7fffffffu) > 0x7f800000u)"
        if name == "abs" and integer:
            return f"abs({x})" if self.type_name(dtype) == "i32" else x
        if name == "sign" and integer:
            return f"sign({x})" if self.type_name(dtype) == "i32" else f"min({x}, 1u)"
        if name == "erf":
            return self._helper_call("erf", args)
        return super().math(name, args, dtype)

    def call(self, name: str, args: list, dtype: str) -> str:
        if name == "fmod":
            return f"({args[0]} % {args[1]})"  # WGSL's % on floats truncates, as fmod does
        return self._helper_call("pow", args) if name == "pow" else super().call(name, args, dtype)

    def _helper_call(self, name: str, args: list) -> str:
        """A call of the helper ``wgsl.HELPERS[name]``, printed once in the preamble."""
        return f"{self.helper(f'nnvm_{name}', wgsl.HELPERS[name])}({', '.join(args)})"

    def int_floordiv(self, a: str, b: str, dtype: str) -> str:
        return f"({a} / {b})" if self.type_name(dtype) == "u32" else self._helper_call("floordiv", [a, b])

    def int_floormod(self, a: str, b: str, dtype: str) -> str:
        return f"({a} % {b})" if self.type_name(dtype) == "u32" else self._helper_call("floormod", [a, b])

    def integer_pow(self, dtype: str, exp_dtype: str) -> str:
        t, e = self.type_name(dtype), self.type_name(exp_dtype)
        return self.helper(f"nnvm_ipow_{t}_{e}", wgsl.integer_pow(f"nnvm_ipow_{t}_{e}", t, e))
