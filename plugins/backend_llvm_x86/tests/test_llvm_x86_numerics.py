"""Values computed by generated code against numpy: math intrinsics, integer division, casts, reductions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nnvm import te
from nnvm.tir.expr import EXP_BOUNDED_RANGE

N = 37  # not a multiple of any vector width: exercises the guarded tails too
_erf = np.vectorize(math.erf)


def _bind1(fn, A):
    """``lambda i: fn(A[i])`` (te.compute reads the lambda's signature, so no default arguments)."""
    return lambda i: fn(A[i])


def _bind2(fn, A, B):
    return lambda i: fn(A[i], B[i])


def _elementwise(name, fn, dtype="float32", out_dtype=None, vector=True):
    A = te.placeholder((N,), dtype=dtype, name="A")
    B = te.compute((N,), lambda i: fn(A[i]), name="B")
    if out_dtype is not None:
        assert B.dtype == out_dtype
    s = te.create_schedule(B.op)
    if vector:
        _, inner = s[B].split(B.op.axis[0], factor=8)
        s[B].vectorize(inner)
    return name, s, [A, B]


def test_float_math_intrinsics(build_all, close, rng):
    x = rng.standard_normal(N).astype("float32") * 2
    pos = np.abs(x) + 0.05
    halves = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.2, -3.7] * 5, "float32")[:N]
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0] * 6, "float32")[:N]
    cases = {
        "exp": (te.exp, np.exp, x), "log": (te.log, np.log, pos), "sqrt": (te.sqrt, np.sqrt, pos),
        "rsqrt": (te.rsqrt, lambda v: 1 / np.sqrt(v), pos), "tanh": (te.tanh, np.tanh, x),
        "sigmoid": (te.sigmoid, lambda v: 1 / (1 + np.exp(-v)), x), "erf": (te.erf, _erf, x),
        "abs": (te.abs, np.abs, x), "floor": (te.floor, np.floor, x), "ceil": (te.ceil, np.ceil, x),
        "round": (te.round, np.round, halves), "trunc": (te.trunc, np.trunc, x),
        "sin": (te.sin, np.sin, x), "cos": (te.cos, np.cos, x),
        "log2": (lambda v: te._call("log2", v), np.log2, pos),
        "exp2": (lambda v: te._call("exp2", v), np.exp2, x),
        "sign": (lambda v: te._call("sign", v), np.sign, special),
        "neg": (lambda v: -v, np.negative, x),
        "isnan": (lambda v: te.select(te.isnan(v), 1.0, 0.0), lambda v: np.isnan(v).astype("float32"),
                  special),
        "square_add": (lambda v: v * v + 3.0 * v - 1.0, lambda v: v * v + 3 * v - 1, x),
        "div": (lambda v: v / 3.0, lambda v: v / np.float32(3), x),
    }
    items = [_elementwise(name + "_vector", tf) for name, (tf, _, _) in cases.items()]
    # the same intrinsics also as plain scalar loops
    items += [_elementwise(name + "_scalar", tf, vector=False) for name, (tf, _, _) in cases.items()]
    funcs = build_all(items)
    for name, (_, nf, data) in cases.items():
        for suffix in ("_vector", "_scalar"):
            out = np.zeros(N, "float32")
            funcs[name + suffix](data.astype("float32"), out)
            with np.errstate(all="ignore"):
                want = nf(data).astype("float32")
            close(name + suffix, out, want, rtol=2e-6, atol=2e-6)


def test_binary_float_ops(build_all, close, rng):
    a = rng.standard_normal(N).astype("float32") * 3
    b = rng.standard_normal(N).astype("float32") * 2 + 0.1
    a[:4] = [np.nan, 1.0, np.nan, -2.0]
    b[:4] = [1.0, np.nan, np.nan, 5.0]
    cases = {
        "maximum": (te.maximum, np.maximum), "minimum": (te.minimum, np.minimum),
        "power": (lambda x, y: te.power(te.abs(x), y), lambda x, y: np.power(np.abs(x), y)),
        "fmod": (te.fmod, np.fmod), "floordiv": (te.floordiv, np.floor_divide),
        "floormod": (te.floormod, np.remainder),
    }
    items = []
    for name, (tf, _) in cases.items():
        A = te.placeholder((N,), name="A")
        B = te.placeholder((N,), name="B")
        C = te.compute((N,), _bind2(tf, A, B), name="C")
        s = te.create_schedule(C.op)
        _, inner = s[C].split(C.op.axis[0], factor=4)
        s[C].vectorize(inner)
        items.append((name, s, [A, B, C]))
    funcs = build_all(items)
    for name, (_, nf) in cases.items():
        out = np.zeros(N, "float32")
        funcs[name](a, b, out)
        with np.errstate(all="ignore"):
            want = nf(a, b)
        close(name, out, want, rtol=1e-5, atol=1e-5)


def test_integer_division_semantics(build_all, close):
    """div truncates toward zero; floordiv / floormod round toward -inf, for every sign combination."""
    a = np.array([7, -7, 7, -7, 0, 13, -13, 1, -1, 100, -100, 5, -5, 9, -9, 3], "int32")
    b = np.array([2, 2, -2, -2, 3, 4, 4, -4, -4, 7, 7, 1, -1, -3, 3, 0], "int32")
    n = len(a)
    items = []
    names = []
    for dtype in ("int32", "int64", "int8"):
        A = te.placeholder((n,), dtype=dtype, name="A")
        B = te.placeholder((n,), dtype=dtype, name="B")
        for op in ("div", "floordiv", "floormod", "fmod"):
            fn = {"div": lambda x, y: x / y, "floordiv": te.floordiv, "floormod": te.floormod,
                  "fmod": te.fmod}[op]
            C = te.compute((n,), _bind2(fn, A, B), name="C")
            items.append((f"{op}_{dtype}", te.create_schedule(C.op), [A, B, C]))
            names.append((op, dtype))
        for k in (4, 3, -3, -4, 1):  # constant divisors, powers of two included
            for op, fn in (("cfloordiv", lambda x, k=k: x // k), ("cfloormod", lambda x, k=k: x % k),
                           ("cdiv", lambda x, k=k, dtype=dtype: x / te.const(k, dtype))):
                C = te.compute((n,), _bind1(fn, A), name="C")
                s = te.create_schedule(C.op)
                _, inner = s[C].split(C.op.axis[0], factor=8)
                s[C].vectorize(inner)
                items.append((f"{op}{k}_{dtype}".replace("-", "m"), s, [A, C]))
    funcs = build_all(items)
    for dtype in ("int32", "int64", "int8"):
        x, y = a.astype(dtype), b.astype(dtype)
        safe = np.where(y == 0, 1, y)
        want = {
            "div": np.where(y == 0, 0, np.trunc(x / safe)).astype(dtype),
            "floordiv": np.where(y == 0, 0, x // safe).astype(dtype),
            "floormod": np.where(y == 0, 0, x % safe).astype(dtype),
            "fmod": np.where(y == 0, 0, np.fmod(x, safe)).astype(dtype),
        }
        for op in want:
            out = np.zeros(n, dtype)
            funcs[f"{op}_{dtype}"](x, y, out)
            close(f"{op} {dtype}", out, want[op])
        for k in (4, 3, -3, -4, 1):
            tag = str(k).replace("-", "m")
            for op, ref in (("cfloordiv", x // k), ("cfloormod", x % k), ("cdiv", np.trunc(x / k))):
                out = np.zeros(n, dtype)
                funcs[f"{op}{tag}_{dtype}"](x, out)
                close(f"{op} by {k} ({dtype})", out, ref.astype(dtype))


def test_division_edge_cases_do_not_trap(build_all, close):
    """MIN // -1 and x // 0 trap on x86 if emitted naively; numpy wraps and gives 0."""
    a = np.array([-2**31, -2**31, 5, -7, 0, 2**31 - 1], "int32")
    b = np.array([-1, 0, 0, -1, -1, -1], "int32")
    items = []
    for op, fn in (("div", lambda x, y: x / y), ("floordiv", te.floordiv), ("floormod", te.floormod)):
        A = te.placeholder((6,), dtype="int32", name="A")
        B = te.placeholder((6,), dtype="int32", name="B")
        C = te.compute((6,), _bind2(fn, A, B), name="C")
        items.append((op, te.create_schedule(C.op), [A, B, C]))
    funcs = build_all(items)
    with np.errstate(all="ignore"):
        wants = {"div": np.where(b == 0, 0, -a * (b == -1)).astype("int32"),
                 "floordiv": np.floor_divide(a, b), "floormod": np.remainder(a, b)}
    for op, want in wants.items():
        out = np.ones(6, "int32")
        funcs[op](a, b, out)
        close(f"{op} edge cases", out, want)


def test_half_and_double_math(build_all, close, rng):
    x = rng.standard_normal(N)
    items = []
    for dtype in ("float16", "float64"):
        for name, fn in (("exp", te.exp), ("tanh", te.tanh), ("erf", te.erf),
                         ("sqrt", lambda v: te.sqrt(te.abs(v))), ("poly", lambda v: v * v - v / 2.0)):
            items.append(_elementwise(f"{name}_{dtype}", fn, dtype=dtype))
    funcs = build_all(items)
    refs = {"exp": np.exp, "tanh": np.tanh, "erf": _erf, "sqrt": lambda v: np.sqrt(np.abs(v)),
            "poly": lambda v: v * v - v / 2}
    for dtype, tol in (("float16", 2e-3), ("float64", 1e-12)):
        data = x.astype(dtype)
        for name, ref in refs.items():
            out = np.zeros(N, dtype)
            funcs[f"{name}_{dtype}"](data, out)
            want = ref(data.astype("float64")).astype(dtype)
            close(f"{name} {dtype}", out, want, rtol=tol, atol=tol)


def test_integer_arithmetic_and_unsigned(build_all, close, rng):
    n = 24
    items = []
    for dtype in ("int8", "uint8", "int16", "uint32", "int64"):
        A = te.placeholder((n,), dtype=dtype, name="A")
        B = te.placeholder((n,), dtype=dtype, name="B")
        C = te.compute((n,), _bind2(lambda x, y: te.maximum(x * y + x - y, te.minimum(x, y)), A, B), name="C")
        D = te.compute((n,), _bind2(lambda x, y: x // y + te.abs(x) + x % y, A, B), name="D")
        for name, T in (("mix", C), ("div", D)):
            s = te.create_schedule(T.op)
            _, inner = s[T].split(T.op.axis[0], factor=8)
            s[T].vectorize(inner)
            items.append((f"{name}_{dtype}", s, [A, B, T]))
    funcs = build_all(items)
    for dtype in ("int8", "uint8", "int16", "uint32", "int64"):
        info = np.iinfo(dtype)
        lo, hi = max(info.min, -50), min(info.max, 50)
        x = rng.integers(lo, hi, n).astype(dtype)
        y = rng.integers(max(lo, 1), hi, n).astype(dtype)
        with np.errstate(over="ignore"):
            out = np.zeros(n, dtype)
            funcs[f"mix_{dtype}"](x, y, out)
            close(f"mix {dtype}", out, np.maximum(x * y + x - y, np.minimum(x, y)))
            out = np.zeros(n, dtype)
            funcs[f"div_{dtype}"](x, y, out)
            close(f"div {dtype}", out, (x // y + np.abs(x) + x % y).astype(dtype))


def test_casts(build_all, close):
    x = np.array([-3.7, -1.5, -0.2, 0.0, 0.4, 1.5, 2.9, 100.25, np.nan, -0.0, 7.0, 300.5], "float32")
    n = len(x)
    conversions = [
        ("float32", "int32"), ("float32", "int8"), ("float32", "bool"), ("float32", "float64"),
        ("float32", "float16"), ("int32", "float32"), ("int32", "int8"), ("int32", "uint16"),
        ("uint8", "float32"), ("uint8", "int64"), ("bool", "float32"), ("bool", "int32"), ("int32", "bool"),
        ("float64", "float32"), ("float16", "float32"), ("int64", "float64"), ("int8", "int32"),
    ]
    items = []
    for src, dst in conversions:
        A = te.placeholder((n,), dtype=src, name="A")
        B = te.compute((n,), _bind1(lambda v, dst=dst: v.astype(dst), A), name="B")
        s = te.create_schedule(B.op)
        _, inner = s[B].split(B.op.axis[0], factor=4)
        s[B].vectorize(inner)
        items.append((f"{src}_to_{dst}", s, [A, B]))
    funcs = build_all(items)
    finite = np.nan_to_num(x, nan=0.0)
    inputs = {
        "float32": x, "float64": x.astype("float64"), "float16": x.astype("float16"),
        "int32": np.array([-300, -129, -1, 0, 1, 127, 128, 255, 256, 70000, -70000, 5], "int32"),
        "uint8": np.array([0, 1, 127, 128, 200, 255, 3, 4, 5, 6, 7, 8], "uint8"),
        "bool": np.array([True, False] * 6), "int64": np.array([-2**40, 2**40, -1, 0] * 3, "int64"),
        "int8": np.array([-128, -1, 0, 1, 127, 5] * 2, "int8"),
    }
    for src, dst in conversions:
        data = inputs[src]
        if src == "float32" and dst in ("int32", "int8"):
            data = np.where(np.abs(finite) < 120, finite, 1.0).astype("float32")  # in range: defined
        out = np.zeros(n, dst)
        funcs[f"{src}_to_{dst}"](data, out)
        with np.errstate(invalid="ignore"):
            want = data.astype(dst)
        close(f"{src} -> {dst}", out, want, rtol=1e-3 if dst == "float16" else 1e-6)


def test_bool_logic_and_select(build_all, close, rng):
    n = 40
    A = te.placeholder((n,), name="A")
    M = te.placeholder((n,), dtype="bool", name="M")
    B = te.compute((n,), lambda i: te.select(te.all_of(A[i] > 0, M[i]) | (A[i] < -1.0), A[i], -A[i]),
                   name="B")
    C = te.compute((n,), lambda i: (A[i] > 0.5) & ~M[i], name="C")
    D = te.compute((n,), lambda i: te.if_then_else(M[i], A[i] * 2.0, 7.0), name="D")
    items = []
    for name, T, args in (("sel", B, [A, M, B]), ("logic", C, [A, M, C]), ("ite", D, [A, M, D])):
        s = te.create_schedule(T.op)
        _, inner = s[T].split(T.op.axis[0], factor=8)
        s[T].vectorize(inner)
        items.append((name, s, args))
    funcs = build_all(items)
    a = rng.standard_normal(n).astype("float32") * 2
    m = rng.random(n) > 0.5
    out = np.zeros(n, "float32")
    funcs["sel"](a, m, out)
    close("select", out, np.where(((a > 0) & m) | (a < -1), a, -a))
    outb = np.zeros(n, bool)
    funcs["logic"](a, m, outb)
    close("logic", outb, (a > 0.5) & ~m)
    funcs["ite"](a, m, out)
    close("if_then_else", out, np.where(m, a * 2, 7.0).astype("float32"))


def test_reductions(build_all, close, rng):
    n, m = 33, 70
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    S_ = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="S")
    k2 = te.reduce_axis((0, m), name="k2")
    M = te.compute((n,), lambda i: te.max(A[i, k2], axis=k2), name="M")
    r0 = te.reduce_axis((0, n), name="r0")
    r1 = te.reduce_axis((0, m), name="r1")
    T = te.compute((1,), lambda _: te.sum(A[r0, r1] * A[r0, r1], axis=[r0, r1]), name="T")
    k3 = te.reduce_axis((0, n), name="k3")
    Col = te.compute((m,), lambda j: te.min(A[k3, j], axis=k3), name="Col")
    items = [("sum", te.create_schedule(S_.op), [A, S_]), ("max", te.create_schedule(M.op), [A, M]),
             ("total", te.create_schedule(T.op), [A, T])]
    s = te.create_schedule(Col.op)
    jo, ji = s[Col].split(Col.op.axis[0], factor=16)
    s[Col].reorder(jo, k3, ji)
    s[Col].vectorize(ji)
    items.append(("colmin", s, [A, Col]))
    funcs = build_all(items)
    a = rng.standard_normal((n, m)).astype("float32")
    out = np.zeros(n, "float32")
    funcs["sum"](a, out)
    close("sum", out, a.sum(axis=1), rtol=1e-5, atol=1e-5)
    funcs["max"](a, out)
    close("max", out, a.max(axis=1))
    tot = np.zeros(1, "float32")
    funcs["total"](a, tot)
    close("sum of squares", tot, np.array([(a * a).sum()]), rtol=1e-4)
    col = np.zeros(m, "float32")
    funcs["colmin"](a, col)
    close("column min", col, a.min(axis=0))


def test_bounded_exp_accuracy(build_all):
    """exp_bounded (no clamps, one scaling) in ulps against float64 over its whole range, vector and scalar
    (the 2**n scaling read from float bits must agree in both), NaN passed through; float64 uses exp."""
    lo, hi = EXP_BOUNDED_RANGE
    x = np.concatenate([np.linspace(lo, hi, 200001), np.linspace(-1, 1, 20001), [lo, hi, 0.0, -0.0],
                        -np.geomspace(1e-8, 87, 20001)]).astype("float32")
    x = np.concatenate([x, [np.nan]])
    n = len(x)
    items = []
    for dtype, lanes in (("float32", 8), ("float32", 1), ("float64", 4)):
        A = te.placeholder((n,), dtype, name="A")
        B = te.compute((n,), _bind1(te.exp_bounded, A), name="B")
        s = te.create_schedule(B.op)
        if lanes > 1:
            _, inner = s[B].split(B.op.axis[0], factor=lanes)
            s[B].vectorize(inner)
        items.append((f"k_{dtype}_{lanes}", s, [A, B]))
    funcs = build_all(items)
    ref = np.exp(x.astype("float64"))
    for dtype, lanes in (("float32", 8), ("float32", 1), ("float64", 4)):
        out = np.zeros(n, dtype)
        funcs[f"k_{dtype}_{lanes}"](x.astype(dtype), out)
        assert np.isnan(out[-1]), f"{dtype} x{lanes}: exp_bounded(NaN) = {out[-1]}"
        spacing = np.spacing(ref[:-1].astype(dtype)).astype("float64")
        ulps = np.abs(out[:-1] - ref[:-1]) / spacing
        worst = int(np.argmax(ulps))
        assert ulps[worst] <= 1.5, (f"{dtype} x{lanes}: {ulps[worst]:.2f} ulp at x={x[worst]!r} "
                                    f"(got {out[worst]!r}, want {ref[worst]!r})")


def test_inline_exp_tanh_erf_accuracy(build_all):
    """float32 exp / tanh / erf are inline polynomials (so they vectorize): check them in ulps against
    float64 over the whole useful range, overflow, denormal results and special values included."""
    grid = np.concatenate([np.linspace(-110, 95, 60001), np.linspace(-4, 4, 20001),
                           np.geomspace(1e-8, 1, 2001), -np.geomspace(1e-8, 1, 2001)]).astype("float32")
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 88.72, 88.73, -87.4, -103.9, -104.0], "float32")
    x = np.concatenate([grid, special])
    n = len(x)
    items = []
    for name in ("exp", "tanh", "erf", "sigmoid"):
        A = te.placeholder((n,), name="A")
        B = te.compute((n,), _bind1(getattr(te, name), A), name="B")
        s = te.create_schedule(B.op)
        _, inner = s[B].split(B.op.axis[0], factor=16)
        s[B].vectorize(inner)
        items.append((f"k_{name}", s, [A, B]))
    funcs = build_all(items)
    x64 = x.astype("float64")
    with np.errstate(all="ignore"):
        refs = {"exp": np.exp(x64), "tanh": np.tanh(x64), "erf": _erf(x64), "sigmoid": 1 / (1 + np.exp(-x64))}
    limits = {"exp": 1.5, "tanh": 8, "erf": 10, "sigmoid": 4}
    for name, ref in refs.items():
        out = np.zeros(n, "float32")
        funcs[f"k_{name}"](x, out)
        with np.errstate(over="ignore"):
            want = ref.astype("float32")
        same_special = (np.isnan(out) == np.isnan(want)) & ((out == want) | ~np.isinf(want))
        assert same_special.all(), f"{name}: wrong at {x[~same_special][:5]}: {out[~same_special][:5]}"
        finite = np.isfinite(want)
        if name == "sigmoid":  # 1 / (1 + exp(-x)) in float32 underflows to 0 a bit early; fine
            finite &= x > -80
        spacing = np.spacing(np.maximum(np.abs(want[finite]), np.finfo("float32").tiny)).astype("float64")
        ulps = np.abs(out[finite].astype("float64") - ref[finite]) / spacing
        worst = int(np.argmax(ulps))
        assert ulps[worst] <= limits[name], (f"{name}: {ulps[worst]:.1f} ulp at x={x[finite][worst]!r} "
                                             f"(got {out[finite][worst]!r}, want {want[finite][worst]!r})")


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_accuracy_against_float64(tmp_path, approximate):
    """GELU (x/2 + x/2 * erf(x / sqrt 2), or tanh's form) compiled, vectorized and not, against float64
    over [-12, 12] and NaN: within erf's 5e-7 (tanh's 1e-6) of 1 + f, times |x| / 2."""
    import onnx
    from onnx import TensorProto, helper

    import nnvm

    path = str(tmp_path / "gelu.onnx")
    x = np.concatenate([np.linspace(-12, 12, 240001), [np.nan]]).astype("float32")
    graph = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"], approximate=approximate)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [len(x)])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9), path)
    got = nnvm.compile(path, target="llvm", tuning_log=False).run(x)[0]
    x64 = x[:-1].astype("float64")
    if approximate == "tanh":
        want = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64**3)))
    else:
        want = 0.5 * x64 * (1 + _erf(x64 / math.sqrt(2)))
    assert np.isnan(got[-1])
    err = np.abs(got[:-1] - want) / np.maximum(0.5 * np.abs(x64), 1e-30)
    limit = 1e-6 if approximate == "tanh" else 5e-7
    worst = int(np.argmax(err))
    assert err[worst] <= limit, (f"{approximate}: {err[worst]:.2e} at x={x64[worst]}: got {got[worst]}, "
                                 f"want {want[worst]}")
