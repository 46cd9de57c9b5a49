"""WGSL facts the printer uses: reserved names, WebGPU's guaranteed limits, how each dtype is stored, and
the source of the helper functions kernels call (WGSL lacks erf, floor division, C's pow on a negative
base and an exact integer power). Kept apart from ``printer.py`` so the printer is its logic only."""

from __future__ import annotations

import math

RESERVED = frozenset("""
alias array atomic bitcast break case const const_assert continue continuing default diagnostic discard
else enable false fn for if let loop override ptr requires return struct switch true var while i32 u32 f32
f16 bool vec2 vec3 vec4 mat2x2 mat3x3 mat4x4 sampler texture_2d select workgroupBarrier storageBarrier
extractBits insertBits pack2x16float unpack2x16float inverseSqrt atomicLoad atomicAnd atomicOr
uniform storage workgroup private function read write read_write target module self layout
""".split())

# WebGPU's guaranteed limits: a module within them runs on every WebGPU device.
DEFAULT_LIMITS = {"max_compute_workgroup_size_x": 256, "max_compute_workgroup_size_y": 256,
                  "max_compute_workgroup_size_z": 64, "max_compute_invocations_per_workgroup": 256,
                  "max_compute_workgroups_per_dimension": 65535, "max_storage_buffers_per_shader_stage": 8,
                  "max_compute_workgroup_storage_size": 16384, "max_storage_buffer_binding_size": 134217728}

# Workgroups along x beyond WebGPU's guaranteed 65535 are folded into y, (x, 1, 1) -> (FOLD, ceil(x /
# FOLD), 1), the same on every device; the kernel rebuilds its index and the spare workgroups return.
FOLD = 65535


def fold_grid(grid: list) -> list:
    """The workgroups a launch of ``grid`` (x, y, z) dispatches."""
    if isinstance(grid[0], int) and grid[0] > FOLD and grid[1] == grid[2] == 1:  # not a size_term
        return [FOLD, -(-grid[0] // FOLD), 1]
    return list(grid)


def fold_at_run(grid: list, fold: bool | str = True) -> list:
    """The workgroups a launch folded at run time dispatches for its bound ``grid``: a grid of symbolic
    dims along one axis, marked ``fold`` in its launch table (the plugin's ``_fold_at_run``): ``True``, x
    folded into y (the next axis must be 1), the kernel reading its workgroup's x index as ``x + y * FOLD``;
    ``"y"``, y folded into z (``y + z * FOLD``, z one). Each kernel guards its body by the grid's extent;
    up to 65535 workgroups the axis folded into is 1 (index 0) and the kernel is the unfolded one."""
    if fold == "y":
        return [grid[0], FOLD, -(-grid[1] // FOLD)] if grid[1] > FOLD else grid
    return [FOLD, -(-grid[0] // FOLD), 1] if grid[0] > FOLD else grid


def dims_binding(params: list, temporaries: list, packed: list) -> int:
    """The binding of a function's kernels that holds the symbolic dims (its last parameter): their own,
    or the packed one (``pack_plan``) where they are packed. Bindings are the unpacked parameters, the
    temporaries, then the packed binding, as the printer declares them."""
    last = len(params) - 1
    bound = len(params) + len(temporaries) - len(packed)
    if any(i == last for i, _, _ in packed):
        return bound
    return last - sum(1 for i, _, _ in packed if i < last)


def pack_plan(params: list, temporaries: list) -> list:
    """``[[index, word offset, nbytes], ...]``: the parameters of a function (entries of its launch table)
    that its kernels read through one packed binding, so no kernel binds more storage buffers than
    every WebGPU device allows (8). The runtime copies them into that buffer before each launch; only
    parameters the function never writes are packed, the last ones first. Empty when all fit."""
    limit = DEFAULT_LIMITS["max_storage_buffers_per_shader_stage"]
    need = len(params) + len(temporaries) - limit + 1
    # a size of symbolic dims (``size_term``) would move every later word: such a buffer stays bound
    readonly = [i for i, p in enumerate(params)
                if p["read"] and not p["written"] and isinstance(p["nbytes"], int)]
    if need < 2 or len(readonly) < 2:
        return []
    plan, words = [], 0
    for i in sorted(readonly[-need:]):
        plan.append([i, words, params[i]["nbytes"]])
        words += -(-params[i]["nbytes"] // 4)
    return plan


def launch_needs(size: list, grid: list, buffers: int) -> list:
    """``(value, limit name, what)`` of a kernel launched with workgroups of ``size`` over ``grid``
    (folded) and binding ``buffers`` storage buffers: what a device's limits must allow."""
    return [*((n, f"max_compute_workgroup_size_{d}", f"threads along {d}") for d, n in zip("xyz", size)),
            (math.prod(size), "max_compute_invocations_per_workgroup", "threads per workgroup"),
            # a grid over symbolic dims (an expression) is never folded; the runtime checks it per binding
            (max(g if isinstance(g, int) else 1 for g in fold_grid(grid)),
             "max_compute_workgroups_per_dimension", "workgroups per axis"),
            (buffers, "max_storage_buffers_per_shader_stage", "storage buffers")]


def entry_point(name: str, size: list, folded: int) -> str:
    """A kernel's first lines: the compute entry point, its workgroup size and position builtins; with a
    grid of ``folded`` workgroups along x folded at compile time (``fold_grid``), the spare workgroups
    return (a uniform branch). One folded at run time guards its body instead (``fold_at_run``)."""
    head = (f"@compute @workgroup_size({', '.join(map(str, size))})\nfn {name}(@builtin(workgroup_id) "
            "nnvm_gid: vec3<u32>, @builtin(local_invocation_id) nnvm_tid: vec3<u32>) {")
    guard = f"\n  if (nnvm_gid.x + nnvm_gid.y * {FOLD}u >= {folded}u) {{ return; }}"
    return head + (guard if folded else "")


def folded_index(axis: str) -> str:
    """The workgroup's index along ``axis`` ("x" or "y") of a grid folded into the next axis."""
    return f"(nnvm_gid.{axis} + nnvm_gid.{'yz'['xy'.index(axis)]} * {FOLD}u)"


def bindings(params: list, read_only) -> list:
    """A kernel's storage bindings (``name: type``), in order; those in ``read_only`` (indices) declared
    ``read``: the dims under a guard of a run-time fold, which a barrier needs uniform (WGSL counts a
    load from a read-only module-scope variable as uniform, from a read-write one as not). The others
    stay ``read_write``: one arena may be bound twice, and WebGPU forbids it read-only beside writable."""
    return [f"@group(0) @binding({i}) var<storage, {'read' if i in read_only else 'read_write'}> {p};"
            for i, p in enumerate(params)]


SCALAR_TYPES = {"float32": "f32", "float16": "f32", "int32": "i32", "int64": "i32", "int8": "i32",
                "int16": "i32", "uint32": "u32", "uint64": "u32", "uint8": "u32", "uint16": "u32",
                "bool": "bool"}
# How buffers hold what WGSL has no 32-bit type for, each value computed in 32 bits:
# - bool, int8, uint8, int16, uint16, float16: packed into ``u32`` words, read with ``extractBits`` or
#   ``unpack2x16float``; a kernel that writes such a buffer binds it as ``atomic<u32>``, since two threads
#   may write bytes of one word (``atomicAnd`` clears its byte, ``atomicOr`` sets it);
# - int64, uint64: ``vec2`` words, the low word read, a store writing the sign (or zero) extension; the
#   values are computed in 32 bits (indices always are: a binding holds at most 2 GiB).
# (bits per element, compute type) of the packed dtypes:
PACKED = {"bool": (8, "u32"), "uint8": (8, "u32"), "int8": (8, "i32"), "uint16": (16, "u32"),
          "int16": (16, "i32"), "float16": (16, "f32")}
WIDE = {"int64": "vec2<i32>", "uint64": "vec2<u32>"}


def wide_store(dtype: str) -> str:
    """``nnvm_wide_<dtype>(v)``: a 32-bit value as the two words of a 64-bit element."""
    t = WIDE[dtype]
    hi = "(v >> 31u)" if dtype == "int64" else "0u"
    return f"fn nnvm_wide_{dtype}(v: {t[5:8]}) -> {t} {{ return {t}(v, {hi}); }}"


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

# Infinity and NaN as values computed at run time: a constant expression whose value is either is a
# shader-creation error (WGSL spec, 8.7 const-expressions; Tint refuses `-bitcast<f32>(0x7f800000u)`,
# naga accepts it), while a value read from a ``let`` is not a constant expression.
SPECIALS = {"nnvm_inf": "0x7f800000u", "nnvm_nan": "0x7fc00000u"}


def specials(text: str) -> dict:
    """``{name: definition}`` of the ``SPECIALS`` functions ``text`` calls."""
    return {name: f"fn {name}() -> f32 {{\n  let bits = {bits};\n  return bitcast<f32>(bits);\n}}"
            for name, bits in SPECIALS.items() if f"{name}()" in text}


# WGSL's pow is exp2(y * log2(x)), undefined for x < 0; C's gives a real result for an integral y.
POW = """fn nnvm_pow(x: f32, y: f32) -> f32 {
  let r = pow(abs(x), y);
  if (x >= 0.0f) { return r; }
  if (y != trunc(y)) { return nnvm_nan(); }
  return select(r, -r, (i32(y) & 1) == 1);
}"""

FLOORDIV = """fn nnvm_floordiv(a: i32, b: i32) -> i32 {
  let q = a / b;
  return select(q, q - 1, (a % b != 0) && ((a < 0) != (b < 0)));
}"""
FLOORMOD = """fn nnvm_floormod(a: i32, b: i32) -> i32 {
  let r = a % b;
  return select(r, r + b, (r != 0) && ((r < 0) != (b < 0)));
}"""

HELPERS = {"erf": ERF, "pow": POW, "floordiv": FLOORDIV, "floormod": FLOORMOD}


def integer_pow(name: str, t: str, e: str) -> str:
    """``a ** b`` for 32-bit integers by squaring, as the C printer's helper: a negative exponent gives 1
    for a == 1, +-1 for a == -1, else 0."""
    neg = ("  if (b < 0) { return select(select(0, select(1, -1, (b & 1) != 0), a == -1), 1, a == 1); }\n"
           if e == "i32" and t == "i32" else "")
    one, eone, ezero = f"1{t[0]}", f"1{e[0]}", f"0{e[0]}"
    return (f"fn {name}(a: {t}, b0: {e}) -> {t} {{\n  var b = b0;\n{neg}  var r: {t} = {one};\n"
            f"  var x = a;\n  for (; b > {ezero}; b = b >> 1u) {{\n"
            f"    if ((b & {eone}) != {ezero}) {{ r = r * x; }}\n    x = x * x;\n  }}\n  return r;\n}}")
